#pragma once
// The built-in task `arith`: multi-step integer arithmetic with worked solutions, small enough for the demo's
// character-level teacher to solve almost always and for a briefly trained student to get visibly worse.
//
// Format (every character is one token of the demo tokenizer; the engine appends <|endoftext|> after "\n"):
//
//     prompt "Q:12+7-5\n"     response "12+7=19;19-5=14;A:14\n"
//     prompt "Q:(3+4)*2\n"    response "3+4=7;7*2=14;A:14\n"
//
// Operations apply left to right; a product of a sum is written with parentheses, so the usual precedence and
// the left-to-right order agree (a prompt like "Q:2+3*4\n" is never generated).
// The response evaluates one operation per step, left to right, as "LEFT OP RIGHT=VALUE;", so every step reads
// the previous value and the next operator and operand, and ends with the answer marker "A:", the final value
// and a newline. Operands are 0..maxOperand (the right operand of '*' is 2..maxMultiplier), every intermediate
// value stays in 0..maxResult, so numbers have at most two digits and there are no negative numbers. With the
// defaults prompt + response is at most 48 characters (arithMaxChars).
//
// Generation uses SplitMix64 and integer arithmetic only, so a seed gives the same problems on every
// platform and standard library.
#include "core/common/random.h"
#include "core/io/prompt_set.h"

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

namespace mismatch::io {

// The project's deterministic generator (core/common/random.h).
using SplitMix64 = mismatch::SplitMix64;

inline const std::string kArithAnswerMarker = "A:";
inline const std::string kArithPromptPrefix = "Q:";

struct ArithOptions {
    std::uint64_t seed = 1;
    int minSteps = 2; // operations per problem, drawn uniformly from minSteps..maxSteps
    int maxSteps = 3;
    int maxOperand = 20; // operands of '+' and '-' and the first number: 0..maxOperand
    // Right operand of '*': 2..maxMultiplier; below 2 disables '*'. Small factors keep the products a
    // character-level model has to learn few (about 130 with the defaults).
    int maxMultiplier = 5;
    int maxResult = 99; // every intermediate and final value: 0..maxResult
    std::string operations = "+-*"; // which of '+', '-', '*' may appear
    bool unique = true; // no prompt twice (a split); false for an endless training stream
    std::unordered_set<std::string> excludePrompts; // prompts never produced (other splits' problems)
    std::string idPrefix = "arith-"; // ids are idPrefix + zero-padded index from 0
};

// Throws InputError ("arith options") when the options cannot produce a problem.
void validateArithOptions(const ArithOptions& options);

// An upper bound on prompt + response characters for problems generated with `options`.
int arithMaxChars(const ArithOptions& options);

// Draws problems one by one: the training loop's endless stream and the splits' generator.
class ArithGenerator {
public:
    explicit ArithGenerator(ArithOptions options);
    // The next problem; throws Error when `unique` or `excludePrompts` leave no new problem to draw.
    Prompt next();

private:
    ArithOptions options_;
    SplitMix64 random_;
    std::unordered_set<std::string> produced_;
    std::int64_t index_ = 0;
};

// `count` problems (count >= 1), ids numbered from 0 with at least four digits.
std::vector<Prompt> generateArith(const ArithOptions& options, int count);

// The reference worked solution of a prompt "Q:EXPR\n" (trailing newline optional): one "L OP R=V;" per
// operation in evaluation order, then "A:V\n". EXPR is non-negative integers, + - * and parentheses with the
// usual precedence. Throws InputError ("arith prompt", "column N") on anything else.
std::string solveArith(const std::string& prompt);

// The final answer of a generated response: the text after the first "A:" up to the next newline, when it is
// an integer ("14", "-3"). nullopt when there is no marker, no newline after it (a response cut off by the
// token limit) or no integer there.
std::optional<std::string> extractAnswer(const std::string& response);

// Exact match of the extracted answer with the reference answer.
bool verifyAnswer(const std::string& response, const std::string& expected);

// The shipped splits (resources/prompts/arith-<split>.jsonl), written by `mismatch prompts generate arith --all`:
//     heldout  512 problems, seed 101
//     probe    128 problems, seed 202, excluding the held-out problems
//     train   4096 problems, seed 303, excluding the held-out and probe problems (a sample for inspection;
//             training draws its own stream with arithSplitOptions(Train, seed) and unique = false)
// Each split's problems are distinct. The exclusions always use the default held-out and probe sets, so a train
// stream with any seed never shows a held-out or probe problem.
enum class ArithSplit { Train, Heldout, Probe };

std::string toString(ArithSplit split);
// nullopt for a name that is not a split.
std::optional<ArithSplit> parseArithSplit(const std::string& name);
int defaultArithCount(ArithSplit split);
std::uint64_t defaultArithSeed(ArithSplit split);

// Default options for a split: its seed, ids "arith-<split>-NNNN", and the exclusions above.
ArithOptions arithSplitOptions(ArithSplit split, std::uint64_t seed);
std::vector<Prompt> generateArithSplit(ArithSplit split, int count, std::uint64_t seed);

} // namespace mismatch::io
