// Structural checks of a compiled grammar, shared by every way one is built.
#pragma once

#include "core/status.h"
#include "grammar/grammar.h"

namespace pagoda::grammar {

// Ok, or an error naming the rule: a rule reachable from root that can never
// finish (no finite derivation), or left recursion (a rule that can derive
// itself before consuming a byte), which a top-down matcher cannot run.
Status check_grammar(const Grammar& g);

// Rules that can derive the empty string.
std::vector<bool> nullable_rules(const Grammar& g);

}  // namespace pagoda::grammar
