#include "grammar/grammar_check.h"

#include <functional>

namespace pagoda::grammar {
namespace {

// Fixed point over "every element of some alternative satisfies `ok`".
std::vector<bool> fixed_point(const Grammar& g, const std::function<bool(const Element&)>& terminal_ok) {
  std::vector<bool> good(g.num_rules(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < g.num_rules(); ++r) {
      if (good[r]) continue;
      for (const uint32_t start : g.rule_alts[r]) {
        bool all = true;
        for (uint32_t p = start; g.elements[p].op != Op::kEnd && all; ++p) {
          const Element& e = g.elements[p];
          all = e.op == Op::kRule ? good[e.arg] : terminal_ok(e);
        }
        if (all) {
          good[r] = true;
          changed = true;
          break;
        }
      }
    }
  }
  return good;
}

}  // namespace

std::vector<bool> nullable_rules(const Grammar& g) {
  return fixed_point(g, [](const Element&) { return false; });
}

Status check_grammar(const Grammar& g) {
  // Reachable rules, from root.
  std::vector<bool> reachable(g.num_rules(), false);
  std::vector<uint32_t> todo{g.root};
  reachable[g.root] = true;
  while (!todo.empty()) {
    const uint32_t r = todo.back();
    todo.pop_back();
    for (const uint32_t start : g.rule_alts[r]) {
      for (uint32_t p = start; g.elements[p].op != Op::kEnd; ++p) {
        const Element& e = g.elements[p];
        if (e.op == Op::kRule && !reachable[e.arg]) {
          reachable[e.arg] = true;
          todo.push_back(e.arg);
        }
      }
    }
  }
  const std::vector<bool> productive =
      fixed_point(g, [&](const Element& e) { return !g.byte_sets[e.arg].empty(); });
  for (size_t r = 0; r < g.num_rules(); ++r) {
    if (reachable[r] && !productive[r])
      return invalid_argument("grammar: rule '" + g.rule_names[r] + "' can never finish (it matches no finite text)");
  }
  // Left recursion: an edge r -> s when s can start r (everything before it
  // nullable); a cycle of such edges is refused.
  const std::vector<bool> nullable = nullable_rules(g);
  std::vector<std::vector<uint32_t>> starts(g.num_rules());
  for (size_t r = 0; r < g.num_rules(); ++r) {
    for (const uint32_t start : g.rule_alts[r]) {
      for (uint32_t p = start; g.elements[p].op == Op::kRule; ++p) {
        starts[r].push_back(g.elements[p].arg);
        if (!nullable[g.elements[p].arg]) break;
      }
    }
  }
  std::vector<int> state(g.num_rules(), 0);  // 0 new, 1 on the DFS path, 2 done
  std::string cycle;
  std::function<bool(uint32_t)> dfs = [&](uint32_t r) {
    state[r] = 1;
    for (const uint32_t s : starts[r]) {
      if (state[s] == 1) {
        cycle = g.rule_names[s];
        return false;
      }
      if (state[s] == 0 && !dfs(s)) return false;
    }
    state[r] = 2;
    return true;
  };
  for (size_t r = 0; r < g.num_rules(); ++r) {
    if (reachable[r] && state[r] == 0 && !dfs(static_cast<uint32_t>(r)))
      return invalid_argument("grammar: rule '" + cycle +
                              "' is left-recursive (it can reach itself before matching a character; a "
                              "repetition of something that can be empty does this too)");
  }
  return Status::ok();
}

}  // namespace pagoda::grammar
