#include "core/io/arith_task.h"

#include "core/common/error.h"

#include <algorithm>
#include <cstdlib>

namespace mismatch::io {

namespace {

const char* const kOptionsSource = "arith options";
const char* const kPromptSource = "arith prompt";
// Draws in a row that may fail (an excluded or repeated prompt, a dead end of operations) before giving up.
constexpr int kMaxFailedDraws = 100000;
// |value| bound in solveArith, far from long long's limits, so no step can overflow.
constexpr long long kMaxMagnitude = 1000000000000000LL;

int decimalDigits(long long value)
{
    int digits = 1;
    for (value = std::llabs(value); value >= 10; value /= 10) {
        ++digits;
    }
    return digits;
}

std::string paddedIndex(std::int64_t index, int width)
{
    std::string digits = std::to_string(index);
    if (static_cast<int>(digits.size()) < width) {
        digits.insert(0, static_cast<size_t>(width) - digits.size(), '0');
    }
    return digits;
}

std::string step(long long left, char operation, long long right, long long value)
{
    return std::to_string(left) + operation + std::to_string(right) + "=" + std::to_string(value) + ";";
}

// One problem: the expression text and its worked solution, or nullopt at a dead end (no operation keeps the
// value in range), which the caller redraws.
struct DrawnProblem {
    std::string expression;
    std::string response;
    long long answer = 0;
};

std::optional<DrawnProblem> drawProblem(const ArithOptions& options, SplitMix64& random)
{
    struct Candidate {
        char operation;
        long long low;
        long long high;
    };
    const int steps = static_cast<int>(random.uniform(options.minSteps, options.maxSteps));
    long long value = random.uniform(0, options.maxOperand);
    DrawnProblem problem;
    problem.expression = std::to_string(value);
    // Whether the expression so far ends in a top-level + or -: a following '*' must then wrap it in
    // parentheses so that the usual precedence still means left to right.
    bool additiveOnTop = false;
    for (int s = 0; s < steps; ++s) {
        std::vector<Candidate> candidates;
        // Fixed order, independent of how options.operations is spelt, so equal options draw equal problems.
        for (const char operation : {'+', '-', '*'}) {
            if (options.operations.find(operation) == std::string::npos) {
                continue;
            }
            if (operation == '+') {
                candidates.push_back({'+', 0, std::min<long long>(options.maxOperand, options.maxResult - value)});
            } else if (operation == '-') {
                candidates.push_back({'-', 0, std::min<long long>(options.maxOperand, value)});
            } else {
                const long long high = value == 0
                    ? options.maxMultiplier
                    : std::min<long long>(options.maxMultiplier, options.maxResult / value);
                if (high >= 2) {
                    candidates.push_back({'*', 2, high});
                }
            }
        }
        if (candidates.empty()) {
            return std::nullopt;
        }
        const Candidate& chosen
            = candidates[static_cast<size_t>(random.uniform(0, static_cast<long long>(candidates.size()) - 1))];
        const long long operand = random.uniform(chosen.low, chosen.high);
        long long next = 0;
        if (chosen.operation == '+') {
            next = value + operand;
        } else if (chosen.operation == '-') {
            next = value - operand;
        } else {
            next = value * operand;
            if (additiveOnTop) {
                problem.expression = "(" + problem.expression + ")";
            }
        }
        additiveOnTop = chosen.operation != '*';
        problem.expression += chosen.operation + std::to_string(operand);
        problem.response += step(value, chosen.operation, operand, next);
        value = next;
    }
    problem.answer = value;
    problem.response += kArithAnswerMarker + std::to_string(value) + "\n";
    return problem;
}

// Recursive descent over EXPR with the usual precedence, writing one step per operation as it is evaluated.
class ExpressionSolver {
public:
    ExpressionSolver(const std::string& text, size_t offset)
        : text_(text)
        , position_(offset)
    {
    }

    long long solve(size_t end)
    {
        end_ = end;
        if (position_ >= end_) {
            fail("empty expression after \"Q:\"");
        }
        const long long value = sum();
        if (position_ != end_) {
            fail(std::string("unexpected '") + text_[position_] + "'");
        }
        return value;
    }

    const std::string& steps() const { return steps_; }

private:
    [[noreturn]] void fail(const std::string& detail) const
    {
        throw InputError(kPromptSource, "column " + std::to_string(position_ + 1), detail);
    }

    bool at(char c) const { return position_ < end_ && text_[position_] == c; }

    long long apply(long long left, char operation, long long right)
    {
        long long value = 0;
        if (operation == '*') {
            if (left != 0 && std::llabs(right) > kMaxMagnitude / std::llabs(left)) {
                fail("value out of range");
            }
            value = left * right;
        } else {
            value = operation == '+' ? left + right : left - right;
        }
        if (std::llabs(value) > kMaxMagnitude) {
            fail("value out of range");
        }
        steps_ += step(left, operation, right, value);
        return value;
    }

    long long sum()
    {
        long long value = product();
        while (at('+') || at('-')) {
            const char operation = text_[position_++];
            value = apply(value, operation, product());
        }
        return value;
    }

    long long product()
    {
        long long value = primary();
        while (at('*')) {
            ++position_;
            value = apply(value, '*', primary());
        }
        return value;
    }

    long long primary()
    {
        if (at('(')) {
            ++position_;
            const long long value = sum();
            if (!at(')')) {
                fail("expected ')'");
            }
            ++position_;
            return value;
        }
        const size_t start = position_;
        long long value = 0;
        while (position_ < end_ && text_[position_] >= '0' && text_[position_] <= '9') {
            if (position_ - start >= 15) {
                fail("number too long");
            }
            value = value * 10 + (text_[position_] - '0');
            ++position_;
        }
        if (position_ == start) {
            fail(position_ < end_ ? std::string("expected a number or '(', found '") + text_[position_] + "'"
                                  : std::string("expected a number or '(' at the end"));
        }
        return value;
    }

    const std::string& text_;
    size_t position_;
    size_t end_ = 0;
    std::string steps_;
};

bool isInteger(const std::string& text)
{
    const size_t digitsStart = !text.empty() && text[0] == '-' ? 1 : 0;
    if (text.size() <= digitsStart) {
        return false;
    }
    return std::all_of(text.begin() + static_cast<std::ptrdiff_t>(digitsStart), text.end(),
        [](char c) { return c >= '0' && c <= '9'; });
}

} // namespace


void validateArithOptions(const ArithOptions& options)
{
    auto fail = [](const std::string& detail) { throw InputError(kOptionsSource, "", detail); };
    if (options.minSteps < 1 || options.maxSteps < options.minSteps) {
        fail("steps must satisfy 1 <= minSteps <= maxSteps (got " + std::to_string(options.minSteps) + ".."
            + std::to_string(options.maxSteps) + ")");
    }
    if (options.maxOperand < 1 || options.maxResult < options.maxOperand) {
        fail("need 1 <= maxOperand <= maxResult (got maxOperand " + std::to_string(options.maxOperand) + ", maxResult "
            + std::to_string(options.maxResult) + ")");
    }
    if (options.maxResult > 1000000000) {
        fail("maxResult above 10^9");
    }
    if (options.operations.empty() || options.operations.find_first_not_of("+-*") != std::string::npos) {
        fail("operations must be a non-empty subset of \"+-*\" (got \"" + options.operations + "\")");
    }
    if (options.operations.find_first_of("+-") == std::string::npos && options.maxMultiplier < 2) {
        fail("only '*' is allowed but maxMultiplier is below 2");
    }
}

int arithMaxChars(const ArithOptions& options)
{
    const int operandDigits = decimalDigits(std::max(options.maxOperand, options.maxMultiplier));
    const int resultDigits = decimalDigits(options.maxResult);
    const int steps = options.maxSteps;
    // "Q:" + numbers + operators + parentheses (a pair needs a '*' after a '+' or '-') + "\n"
    const int prompt = 2 + (steps + 1) * operandDigits + steps + 2 * (steps / 2) + 1;
    // per step "L" "op" "R" "=" "V" ";", then "A:" "V" "\n"
    const int response = steps * (resultDigits + 1 + operandDigits + 1 + resultDigits + 1) + 2 + resultDigits + 1;
    return prompt + response;
}

ArithGenerator::ArithGenerator(ArithOptions options)
    : options_(std::move(options))
    , random_(options_.seed)
{
    validateArithOptions(options_);
}

Prompt ArithGenerator::next()
{
    for (int failed = 0; failed < kMaxFailedDraws; ++failed) {
        const std::optional<DrawnProblem> problem = drawProblem(options_, random_);
        if (!problem) {
            continue;
        }
        std::string text = kArithPromptPrefix + problem->expression + "\n";
        if (options_.excludePrompts.count(text) != 0) {
            continue;
        }
        if (options_.unique && !produced_.insert(text).second) {
            continue;
        }
        Prompt prompt;
        prompt.id = options_.idPrefix + paddedIndex(index_++, 4);
        prompt.prompt = std::move(text);
        prompt.answer = std::to_string(problem->answer);
        return prompt;
    }
    throw Error("arith: no new problem in " + std::to_string(kMaxFailedDraws)
        + " draws; ask for fewer problems or widen the options");
}

std::vector<Prompt> generateArith(const ArithOptions& options, int count)
{
    if (count < 1) {
        throw InputError(kOptionsSource, "", "count must be at least 1 (got " + std::to_string(count) + ")");
    }
    ArithGenerator generator(options);
    std::vector<Prompt> prompts;
    prompts.reserve(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) {
        prompts.push_back(generator.next());
    }
    return prompts;
}

std::string solveArith(const std::string& prompt)
{
    if (prompt.compare(0, kArithPromptPrefix.size(), kArithPromptPrefix) != 0) {
        throw InputError(kPromptSource, "column 1", "expected the prefix \"" + kArithPromptPrefix + "\"");
    }
    const size_t end = !prompt.empty() && prompt.back() == '\n' ? prompt.size() - 1 : prompt.size();
    ExpressionSolver solver(prompt, kArithPromptPrefix.size());
    const long long value = solver.solve(end);
    return solver.steps() + kArithAnswerMarker + std::to_string(value) + "\n";
}

std::optional<std::string> extractAnswer(const std::string& response)
{
    const size_t marker = response.find(kArithAnswerMarker);
    if (marker == std::string::npos) {
        return std::nullopt;
    }
    const size_t start = marker + kArithAnswerMarker.size();
    const size_t newline = response.find('\n', start);
    if (newline == std::string::npos) {
        return std::nullopt;
    }
    std::string answer = response.substr(start, newline - start);
    if (!isInteger(answer)) {
        return std::nullopt;
    }
    return answer;
}

bool verifyAnswer(const std::string& response, const std::string& expected)
{
    const std::optional<std::string> answer = extractAnswer(response);
    return answer && *answer == expected;
}

std::string toString(ArithSplit split)
{
    switch (split) {
    case ArithSplit::Train:
        return "train";
    case ArithSplit::Heldout:
        return "heldout";
    case ArithSplit::Probe:
        return "probe";
    }
    return "unknown";
}

std::optional<ArithSplit> parseArithSplit(const std::string& name)
{
    for (const ArithSplit split : {ArithSplit::Train, ArithSplit::Heldout, ArithSplit::Probe}) {
        if (toString(split) == name) {
            return split;
        }
    }
    return std::nullopt;
}

int defaultArithCount(ArithSplit split)
{
    switch (split) {
    case ArithSplit::Train:
        return 4096;
    case ArithSplit::Heldout:
        return 512;
    case ArithSplit::Probe:
        return 128;
    }
    return 0;
}

std::uint64_t defaultArithSeed(ArithSplit split)
{
    switch (split) {
    case ArithSplit::Train:
        return 303;
    case ArithSplit::Heldout:
        return 101;
    case ArithSplit::Probe:
        return 202;
    }
    return 0;
}

ArithOptions arithSplitOptions(ArithSplit split, std::uint64_t seed)
{
    ArithOptions options;
    options.seed = seed;
    options.idPrefix = "arith-" + toString(split) + "-";
    // Each split excludes the default problems of the splits before it (heldout, then probe), each generated
    // once with the exclusions collected so far.
    for (const ArithSplit earlier : {ArithSplit::Heldout, ArithSplit::Probe}) {
        if (earlier == split) {
            break;
        }
        ArithOptions earlierOptions;
        earlierOptions.seed = defaultArithSeed(earlier);
        earlierOptions.excludePrompts = options.excludePrompts;
        for (Prompt& prompt : generateArith(earlierOptions, defaultArithCount(earlier))) {
            options.excludePrompts.insert(std::move(prompt.prompt));
        }
    }
    return options;
}

std::vector<Prompt> generateArithSplit(ArithSplit split, int count, std::uint64_t seed)
{
    return generateArith(arithSplitOptions(split, seed), count);
}

} // namespace mismatch::io
