// Valid example specs of every op, in canonical and non-canonical spelling: the IR's round-trip
// test, the check of every op kind against ref, and `kiln check --all` draw from one table.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace jit::test {

/// Op name -> valid spec texts. Every op of ir/op_list.def has at least one entry (the IR
/// round-trip test fails otherwise).
const std::map<std::string, std::vector<std::string>>& valid_examples();

}  // namespace jit::test
