#include "grammar/grammar_check.h"

namespace pagoda::grammar {
namespace {

// Rules with an alternative whose every element is good (terminals per
// `terminal_ok`, references to good rules), by propagation from the
// alternatives that are good outright: linear in the grammar's size.
template <typename TerminalOk>
std::vector<bool> fixed_point(const Grammar& g, TerminalOk terminal_ok) {
  struct Alt {
    uint32_t rule;
    uint32_t missing;  // elements not yet known good
  };
  std::vector<Alt> alts;
  std::vector<std::vector<uint32_t>> uses(g.num_rules());  // rule -> alternatives referencing it
  std::vector<bool> good(g.num_rules(), false);
  std::vector<uint32_t> todo;
  for (size_t r = 0; r < g.num_rules(); ++r) {
    for (const uint32_t start : g.rule_alts[r]) {
      const auto a = static_cast<uint32_t>(alts.size());
      alts.push_back({static_cast<uint32_t>(r), 0});
      for (uint32_t p = start; g.elements[p].op != Op::kEnd; ++p) {
        const Element& e = g.elements[p];
        if (e.op == Op::kRule) {
          ++alts[a].missing;
          uses[e.arg].push_back(a);
        } else if (!terminal_ok(e)) {
          alts[a].missing = UINT32_MAX / 2;  // never good
        }
      }
      if (alts[a].missing == 0 && !good[r]) {
        good[r] = true;
        todo.push_back(static_cast<uint32_t>(r));
      }
    }
  }
  while (!todo.empty()) {
    const uint32_t r = todo.back();
    todo.pop_back();
    for (const uint32_t a : uses[r]) {
      if (--alts[a].missing == 0 && !good[alts[a].rule]) {
        good[alts[a].rule] = true;
        todo.push_back(alts[a].rule);
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
  const std::vector<bool> productive = fixed_point(g, [&](const Element& e) { return !g.byte_sets[e.arg].empty(); });
  for (size_t r = 0; r < g.num_rules(); ++r) {
    if (reachable[r] && !productive[r])
      return invalid_argument("grammar: rule '" + g.rule_names[r] + "' can never finish (it matches no finite text)");
  }
  // Left recursion: an edge r -> s when s can start r (everything before it
  // nullable); a cycle of such edges is refused. Iterative DFS.
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
  std::vector<uint8_t> state(g.num_rules(), 0);   // 0 new, 1 on the DFS path, 2 done
  std::vector<std::pair<uint32_t, size_t>> path;  // rule, next edge
  for (size_t root = 0; root < g.num_rules(); ++root) {
    if (!reachable[root] || state[root] != 0) continue;
    path.emplace_back(static_cast<uint32_t>(root), 0);
    state[root] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == starts[r].size()) {
        state[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t s = starts[r][next++];
      if (state[s] == 1)
        return invalid_argument("grammar: rule '" + g.rule_names[s] +
                                "' is left-recursive (it can reach itself before matching a character; a "
                                "repetition of something that can be empty does this too)");
      if (state[s] == 0) {
        state[s] = 1;
        path.emplace_back(s, 0);
      }
    }
  }
  return Status::ok();
}

}  // namespace pagoda::grammar
