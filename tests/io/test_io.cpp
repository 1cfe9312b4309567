// Tests of core/io: the arith task (generator, worked solutions, verifier, shipped splits), prompt sets (loader
// errors, templates, writer), the demo tokenizer.json, and the `mismatch prompts` command.
#include "app/cli/cli.h"
#include "core/common/error.h"
#include "core/io/arith_task.h"
#include "core/io/char_tokenizer_json.h"
#include "core/io/prompt_set.h"
#include "core/common/yaml_mapping.h"
#include "core/common/yaml_scalar.h"
#include "tests/common/test_main.h"

#include <QFile>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

using namespace mismatch;
using namespace mismatch::io;

namespace {

// An evaluator written for the test, independent of solveArith: precedence climbing over the expression with
// long long arithmetic. Returns false on anything but digits, + - * and balanced parentheses.
class Evaluator {
public:
    explicit Evaluator(std::string text)
        : text_(std::move(text))
    {
    }

    bool evaluate(long long& value) { return parse(1, value) && position_ == text_.size(); }

private:
    // 0 for anything that is not an operator, so the loop below stops there.
    static int precedence(char c) { return c == '*' ? 2 : (c == '+' || c == '-') ? 1 : 0; }

    bool atom(long long& value)
    {
        if (position_ < text_.size() && text_[position_] == '(') {
            ++position_;
            if (!parse(1, value) || position_ >= text_.size() || text_[position_] != ')') {
                return false;
            }
            ++position_;
            return true;
        }
        const size_t start = position_;
        value = 0;
        while (position_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[position_]))) {
            value = value * 10 + (text_[position_++] - '0');
        }
        return position_ > start;
    }

    // Operators of at least `minimumPrecedence`, left associative: the right operand only takes tighter ones.
    bool parse(int minimumPrecedence, long long& value)
    {
        if (!atom(value)) {
            return false;
        }
        while (position_ < text_.size() && precedence(text_[position_]) >= minimumPrecedence) {
            const char operation = text_[position_++];
            long long right = 0;
            if (!parse(precedence(operation) + 1, right)) {
                return false;
            }
            value = operation == '*' ? value * right : operation == '+' ? value + right : value - right;
        }
        return true;
    }

    std::string text_;
    size_t position_ = 0;
};

// The expression of a prompt "Q:EXPR\n".
std::string expressionOf(const std::string& prompt)
{
    return prompt.substr(2, prompt.size() - 3);
}

// Checks a worked solution step by step with plain arithmetic: each "L O R=V;" computes V, each L is the
// previous V, and "A:" carries the last V. Returns the number of steps, or -1 with `why` set.
int checkWorkedSolution(const std::string& response, long long expected, std::string& why)
{
    std::istringstream in(response);
    std::string piece;
    std::vector<std::string> pieces;
    while (std::getline(in, piece, ';')) {
        pieces.push_back(piece);
    }
    if (pieces.empty() || pieces.back() != "A:" + std::to_string(expected) + "\n") {
        why = "does not end in A:" + std::to_string(expected) + "\\n";
        return -1;
    }
    long long previous = 0;
    for (size_t i = 0; i + 1 < pieces.size(); ++i) {
        long long left = 0;
        long long right = 0;
        long long value = 0;
        char operation = 0;
        char equals = 0;
        std::istringstream step(pieces[i]);
        if (!(step >> left >> operation >> right >> equals >> value) || equals != '=' || !step.eof()) {
            why = "malformed step " + pieces[i];
            return -1;
        }
        const long long computed = operation == '+' ? left + right : operation == '-' ? left - right : left * right;
        if (computed != value || (i > 0 && left != previous)) {
            why = "wrong step " + pieces[i];
            return -1;
        }
        previous = value;
    }
    return static_cast<int>(pieces.size()) - 1;
}

std::vector<Prompt> readShipped(const std::string& split)
{
    return loadPromptSet(std::string(MISMATCH_SOURCE_DIR) + "/resources/prompts/arith-" + split + ".jsonl").prompts;
}

std::string readFile(const QString& path)
{
    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        return {};
    }
    return file.readAll().toStdString();
}

void writeFile(const QString& path, const std::string& text)
{
    std::ofstream out(path.toStdString(), std::ios::binary);
    out << text;
}

int runCli(const std::vector<std::string>& arguments, std::string& out, std::string& err)
{
    std::ostringstream outStream;
    std::ostringstream errStream;
    std::vector<std::string> full {"mismatch"};
    full.insert(full.end(), arguments.begin(), arguments.end());
    const int code = cli::run(full, outStream, errStream);
    out = outStream.str();
    err = errStream.str();
    return code;
}

// GPT-2's bytes_to_unicode, transcribed from its published Python: printable ranges first, then the rest
// appended in byte order at 256 + n. Returns the code point for each byte.
std::vector<unsigned> gpt2BytesToUnicode()
{
    std::vector<unsigned> bytes;
    for (unsigned b = '!'; b <= '~'; ++b) {
        bytes.push_back(b);
    }
    for (unsigned b = 0xA1; b <= 0xAC; ++b) {
        bytes.push_back(b);
    }
    for (unsigned b = 0xAE; b <= 0xFF; ++b) {
        bytes.push_back(b);
    }
    std::vector<unsigned> codePoints = bytes;
    unsigned n = 0;
    for (unsigned b = 0; b < 256; ++b) {
        if (std::find(bytes.begin(), bytes.end(), b) == bytes.end()) {
            bytes.push_back(b);
            codePoints.push_back(256 + n++);
        }
    }
    std::vector<unsigned> byByte(256);
    for (size_t i = 0; i < bytes.size(); ++i) {
        byByte[bytes[i]] = codePoints[i];
    }
    return byByte;
}

// What YamlMappingReader's Fail receives, thrown so that a test can look at the place and the detail.
struct ReaderFailure {
    io::SourceLocation where;
    std::string detail;
};

io::YamlMappingReader::Fail throwReaderFailure()
{
    return [](const io::SourceLocation& where, const std::string& detail) { throw ReaderFailure {where, detail}; };
}

// The failure reading `run` reports; a failure with detail "(none)" when it reports none.
template <typename Run> ReaderFailure readerFailure(Run run)
{
    try {
        run();
    } catch (const ReaderFailure& failure) {
        return failure;
    }
    return ReaderFailure {{}, "(none)"};
}

} // namespace

class TestIo : public QObject {
    Q_OBJECT

private slots:
    void splitMixMatchesReference();
    void uniformStaysInRangeAndCoversIt();
    void generatorIsDeterministic();
    void workedSolutionsAreCorrect_data();
    void workedSolutionsAreCorrect();
    void solveArithUsesPrecedence_data();
    void solveArithUsesPrecedence();
    void solveArithRejectsBadPrompts_data();
    void solveArithRejectsBadPrompts();
    void verifier_data();
    void verifier();
    void badArithOptionsThrow();
    void shippedSplitsHaveTheirSizesAndAreDisjoint();
    void shippedSplitsAreWhatTheCommandWrites();
    void trainStreamAvoidsEvaluationProblems();
    void loaderReportsLine_data();
    void loaderReportsLine();
    void loaderAcceptsHeaderBlankLinesAndCrlf();
    void templates_data();
    void templates();
    void badTemplates_data();
    void badTemplates();
    void writerRoundTripsAndLeavesNoTemporary();
    void writerRefusesInvalidSetAndKeepsOldFile();
    void checkCommand();
    void demoTokenizerJson();
    void yamlReaderLocatesNestedEntries();
    void yamlReaderRefusesDuplicateKeyNamingBothPlaces();
    void yamlReaderRefusesMissingKeyAndWrongKinds();
    void yamlReaderPlacesUnknownKeyAtKeyOrMapping();
};

void TestIo::splitMixMatchesReference()
{
    // First outputs of Vigna's splitmix64.c from state 0.
    SplitMix64 random(0);
    QCOMPARE(random.next(), 0xe220a8397b1dcdafULL);
    QCOMPARE(random.next(), 0x6e789e6aa1b965f4ULL);
    QCOMPARE(random.next(), 0x06c45d188009454fULL);
}

void TestIo::uniformStaysInRangeAndCoversIt()
{
    SplitMix64 random(QRandomGenerator::global()->generate64());
    std::vector<int> hits(7, 0);
    for (int i = 0; i < 7000; ++i) {
        const std::int64_t value = random.uniform(-3, 3);
        QVERIFY(value >= -3 && value <= 3);
        ++hits[static_cast<size_t>(value + 3)];
    }
    for (int h : hits) {
        // 1000 expected per value; 6 standard deviations is about 190.
        QVERIFY2(h > 800 && h < 1200, qPrintable(QString::number(h)));
    }
    QCOMPARE(random.uniform(5, 5), std::int64_t(5));
}

void TestIo::generatorIsDeterministic()
{
    ArithOptions options;
    options.seed = QRandomGenerator::global()->generate64();
    const auto first = generateArith(options, 200);
    const auto again = generateArith(options, 200);
    QCOMPARE(first.size(), size_t(200));
    for (size_t i = 0; i < first.size(); ++i) {
        QCOMPARE(first[i].prompt, again[i].prompt);
        QCOMPARE(first[i].answer, again[i].answer);
        QCOMPARE(first[i].id, again[i].id);
    }
    options.seed += 1;
    const auto other = generateArith(options, 200);
    int same = 0;
    for (size_t i = 0; i < first.size(); ++i) {
        same += first[i].prompt == other[i].prompt ? 1 : 0;
    }
    QVERIFY2(same < 10, qPrintable(QString("%1 of 200 problems equal across seeds").arg(same)));
    // Spelling the operations differently does not change the problems.
    options.operations = "*-+";
    const auto reordered = generateArith(options, 50);
    for (size_t i = 0; i < reordered.size(); ++i) {
        QCOMPARE(reordered[i].prompt, other[i].prompt);
    }
}

void TestIo::workedSolutionsAreCorrect_data()
{
    QTest::addColumn<int>("minSteps");
    QTest::addColumn<int>("maxSteps");
    QTest::addColumn<QString>("operations");
    QTest::addColumn<int>("maxResult");
    QTest::newRow("defaults") << 2 << 3 << "+-*" << 99;
    QTest::newRow("one step") << 1 << 1 << "+-*" << 99;
    QTest::newRow("long chains") << 4 << 6 << "+-*" << 99;
    QTest::newRow("additive only") << 2 << 3 << "+-" << 99;
    QTest::newRow("products") << 2 << 4 << "*+" << 999;
}

void TestIo::workedSolutionsAreCorrect()
{
    QFETCH(int, minSteps);
    QFETCH(int, maxSteps);
    QFETCH(QString, operations);
    QFETCH(int, maxResult);
    ArithOptions options;
    options.seed = QRandomGenerator::global()->generate64();
    options.minSteps = minSteps;
    options.maxSteps = maxSteps;
    options.operations = operations.toStdString();
    options.maxResult = maxResult;
    options.unique = false;
    const std::string seedText = "seed " + std::to_string(options.seed);
    std::set<char> seenOperations;
    bool sawParentheses = false;
    for (const Prompt& problem : generateArith(options, 2000)) {
        const std::string context = seedText + ": " + problem.prompt;
        QVERIFY2(problem.prompt.rfind("Q:", 0) == 0 && problem.prompt.back() == '\n', context.c_str());
        const std::string expression = expressionOf(problem.prompt);
        long long expected = 0;
        QVERIFY2(Evaluator(expression).evaluate(expected), context.c_str());
        QCOMPARE(problem.answer, std::to_string(expected));
        QVERIFY2(expected >= 0 && expected <= maxResult, context.c_str());

        const std::string solution = solveArith(problem.prompt);
        std::string why;
        const int steps = checkWorkedSolution(solution, expected, why);
        QVERIFY2(steps >= 0, (context + " -> " + solution + ": " + why).c_str());
        QVERIFY2(steps >= minSteps && steps <= maxSteps, context.c_str());
        QVERIFY2(verifyAnswer(solution, problem.answer), context.c_str());
        QVERIFY2(static_cast<int>(problem.prompt.size() + solution.size()) <= arithMaxChars(options), context.c_str());
        for (char c : expression) {
            if (c == '+' || c == '-' || c == '*') {
                seenOperations.insert(c);
            }
        }
        sawParentheses = sawParentheses || expression.find('(') != std::string::npos;
        // Every intermediate value stays in range: the steps' values are non-negative and bounded.
        std::istringstream values(solution);
        std::string piece;
        while (std::getline(values, piece, ';')) {
            const size_t equals = piece.find('=');
            if (equals != std::string::npos) {
                const long long value = std::stoll(piece.substr(equals + 1));
                QVERIFY2(value >= 0 && value <= maxResult, context.c_str());
            }
        }
    }
    QCOMPARE(seenOperations.size(), size_t(operations.size()));
    if (operations.contains('*') && operations.contains('+') && maxSteps >= 2) {
        QVERIFY(sawParentheses);
    }
}

void TestIo::solveArithUsesPrecedence_data()
{
    QTest::addColumn<QString>("prompt");
    QTest::addColumn<QString>("solution");
    // Written by hand.
    QTest::newRow("left to right") << "Q:12+7-5\n"
                                   << "12+7=19;19-5=14;A:14\n";
    QTest::newRow("parentheses") << "Q:(3+4)*2\n"
                                 << "3+4=7;7*2=14;A:14\n";
    QTest::newRow("product first") << "Q:2+3*4\n"
                                   << "3*4=12;2+12=14;A:14\n";
    QTest::newRow("negative value") << "Q:3-5+1\n"
                                    << "3-5=-2;-2+1=-1;A:-1\n";
    QTest::newRow("no newline") << "Q:(1+2)*(3+4)"
                                << "1+2=3;3+4=7;3*7=21;A:21\n";
    QTest::newRow("single number") << "Q:7\n"
                                   << "A:7\n";
}

void TestIo::solveArithUsesPrecedence()
{
    QFETCH(QString, prompt);
    QFETCH(QString, solution);
    QCOMPARE(QString::fromStdString(solveArith(prompt.toStdString())), solution);
}

void TestIo::solveArithRejectsBadPrompts_data()
{
    QTest::addColumn<QString>("prompt");
    QTest::addColumn<QString>("location");
    QTest::newRow("no prefix") << "12+7\n"
                               << "column 1";
    QTest::newRow("empty") << "Q:\n"
                           << "column 3";
    QTest::newRow("dangling operator") << "Q:1+\n"
                                       << "column 5";
    QTest::newRow("unclosed") << "Q:(1+2\n"
                              << "column 7";
    QTest::newRow("division") << "Q:8/2\n"
                              << "column 4";
    QTest::newRow("space") << "Q:1 +2\n"
                           << "column 4";
    QTest::newRow("overflow") << "Q:999999999*999999999*99\n"
                              << "column 22";
}

void TestIo::solveArithRejectsBadPrompts()
{
    QFETCH(QString, prompt);
    QFETCH(QString, location);
    try {
        solveArith(prompt.toStdString());
        QFAIL("no InputError");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.location()), location);
    }
}

void TestIo::verifier_data()
{
    QTest::addColumn<QString>("response");
    QTest::addColumn<QString>("expected");
    QTest::addColumn<bool>("accepted");
    QTest::addColumn<QString>("extracted"); // "<none>" when extractAnswer gives nullopt
    QTest::newRow("correct") << "12+7=19;19-5=14;A:14\n"
                             << "14" << true << "14";
    QTest::newRow("wrong answer") << "12+7=19;19-5=13;A:13\n"
                                  << "14" << false << "13";
    QTest::newRow("answer only") << "A:14\n"
                                 << "14" << true << "14";
    QTest::newRow("text after the newline") << "A:14\nA:15\n"
                                            << "14" << true << "14";
    QTest::newRow("no marker") << "12+7=19;19-5=14;14\n"
                               << "14" << false << "<none>";
    QTest::newRow("cut off before the newline") << "12+7=19;19-5=14;A:1"
                                                << "1" << false << "<none>";
    QTest::newRow("empty answer") << "A:\n"
                                  << "" << false << "<none>";
    QTest::newRow("not a number") << "A:1x\n"
                                  << "1x" << false << "<none>";
    QTest::newRow("space") << "A: 14\n"
                           << "14" << false << "<none>";
    QTest::newRow("negative") << "A:-3\n"
                              << "-3" << true << "-3";
    QTest::newRow("prefix of the answer") << "A:1\n"
                                          << "14" << false << "1";
    QTest::newRow("empty response") << ""
                                    << "14" << false << "<none>";
}

void TestIo::verifier()
{
    QFETCH(QString, response);
    QFETCH(QString, expected);
    QFETCH(bool, accepted);
    QFETCH(QString, extracted);
    QCOMPARE(verifyAnswer(response.toStdString(), expected.toStdString()), accepted);
    const auto answer = extractAnswer(response.toStdString());
    QCOMPARE(answer ? QString::fromStdString(*answer) : QString("<none>"), extracted);
}

void TestIo::badArithOptionsThrow()
{
    ArithOptions options;
    options.minSteps = 0;
    QVERIFY_THROWS_EXCEPTION(InputError, generateArith(options, 1));
    options = {};
    options.operations = "+/";
    QVERIFY_THROWS_EXCEPTION(InputError, generateArith(options, 1));
    options = {};
    options.maxResult = 5; // below maxOperand
    QVERIFY_THROWS_EXCEPTION(InputError, generateArith(options, 1));
    options = {};
    QVERIFY_THROWS_EXCEPTION(InputError, generateArith(options, 0));
    // More distinct problems than exist: one step of '+' on 0..1 with results up to 1 has 3.
    options.minSteps = options.maxSteps = 1;
    options.maxOperand = options.maxResult = 1;
    options.operations = "+";
    QCOMPARE(generateArith(options, 3).size(), size_t(3));
    QVERIFY_THROWS_EXCEPTION(Error, generateArith(options, 4));
}

void TestIo::shippedSplitsHaveTheirSizesAndAreDisjoint()
{
    const auto train = readShipped("train");
    const auto heldout = readShipped("heldout");
    const auto probe = readShipped("probe");
    QCOMPARE(train.size(), size_t(4096));
    QCOMPARE(heldout.size(), size_t(512));
    QCOMPARE(probe.size(), size_t(128));
    std::set<std::string> all;
    size_t longest = 0;
    for (const auto* split : {&train, &heldout, &probe}) {
        for (const Prompt& problem : *split) {
            QVERIFY2(all.insert(problem.prompt).second, ("shared or repeated: " + problem.prompt).c_str());
            long long value = 0;
            QVERIFY2(Evaluator(expressionOf(problem.prompt)).evaluate(value), problem.prompt.c_str());
            QCOMPARE(problem.answer, std::to_string(value));
            longest = std::max(longest, problem.prompt.size() + solveArith(problem.prompt).size());
        }
    }
    QCOMPARE(all.size(), size_t(4096 + 512 + 128));
    QVERIFY2(longest <= 48, qPrintable(QString::number(longest)));
    QVERIFY(arithMaxChars(ArithOptions {}) <= 48);
}

void TestIo::shippedSplitsAreWhatTheCommandWrites()
{
    QTemporaryDir directory;
    QVERIFY(directory.isValid());
    std::string out;
    std::string err;
    QCOMPARE(
        runCli({"prompts", "generate", "arith", "--all", "--out-dir", directory.path().toStdString()}, out, err), 0);
    for (const char* split : {"train", "heldout", "probe"}) {
        const QString name = QString("arith-%1.jsonl").arg(split);
        const std::string generated = readFile(directory.filePath(name));
        QVERIFY(!generated.empty());
        QVERIFY2(generated == readFile(QString(MISMATCH_SOURCE_DIR) + "/resources/prompts/" + name),
            qPrintable(name + " differs from what the command writes"));
    }
    // One split by itself with its defaults is the same file as with --all.
    const std::string single = directory.filePath("probe.jsonl").toStdString();
    QCOMPARE(runCli({"prompts", "generate", "arith", "--split", "probe", "--out", single}, out, err), 0);
    QVERIFY(readFile(QString::fromStdString(single)) == readFile(directory.filePath("arith-probe.jsonl")));
    // A different seed and count.
    QCOMPARE(runCli({"--json", "prompts", "generate", "arith", "--split", "train", "--count", "10", "--seed", "7",
                        "--out", single},
                 out, err),
        0);
    const auto report = nlohmann::json::parse(out);
    QCOMPARE(report["files"][0]["count"].get<int>(), 10);
    QCOMPARE(report["files"][0]["seed"].get<int>(), 7);
    QCOMPARE(loadPromptSet(single).prompts.size(), size_t(10));
    // --all and --split do not mix; neither is a bad command line.
    QCOMPARE(runCli({"prompts", "generate", "arith", "--all", "--split", "probe", "--out-dir", "x"}, out, err), 2);
    QCOMPARE(runCli({"prompts", "generate", "arith"}, out, err), 2);
}

void TestIo::trainStreamAvoidsEvaluationProblems()
{
    std::set<std::string> evaluation;
    for (const char* split : {"heldout", "probe"}) {
        for (const Prompt& problem : readShipped(split)) {
            evaluation.insert(problem.prompt);
        }
    }
    ArithOptions options = arithSplitOptions(ArithSplit::Train, QRandomGenerator::global()->generate64());
    options.unique = false;
    ArithGenerator stream(options);
    for (int i = 0; i < 20000; ++i) {
        const Prompt problem = stream.next();
        QVERIFY2(evaluation.count(problem.prompt) == 0, problem.prompt.c_str());
    }
}

void TestIo::loaderReportsLine_data()
{
    QTest::addColumn<QString>("text");
    QTest::addColumn<QString>("location");
    QTest::addColumn<QString>("detail");
    const QString good = R"({"id": "a", "prompt": "p", "answer": "1"})";
    QTest::newRow("invalid JSON") << good + "\n{\"id\": \"b\", \"prompt\": \n"
                                  << "line 2"
                                  << "invalid JSON";
    QTest::newRow("not an object") << good + "\n[1, 2]\n"
                                   << "line 2"
                                   << "expected a JSON object, found an array";
    QTest::newRow("missing answer") << good + "\n\n{\"id\": \"b\", \"prompt\": \"p\"}\n"
                                    << "line 3"
                                    << "missing \"answer\"";
    QTest::newRow("id is a number") << R"({"id": 3, "prompt": "p", "answer": "1"})"
                                    << "line 1"
                                    << "\"id\" is a number, expected a string";
    QTest::newRow("answer is a number") << R"({"id": "a", "prompt": "p", "answer": 1})"
                                        << "line 1"
                                        << "\"answer\" is a number, expected a string";
    QTest::newRow("unknown key") << R"({"id": "a", "promt": "p", "answer": "1"})"
                                 << "line 1"
                                 << "unknown key \"promt\"";
    QTest::newRow("empty id") << R"({"id": "", "prompt": "p", "answer": "1"})"
                              << "line 1"
                              << "\"id\" is empty";
    QTest::newRow("empty prompt") << R"({"id": "a", "prompt": "", "answer": "1"})"
                                  << "line 1"
                                  << "\"prompt\" is empty";
    QTest::newRow("duplicate id") << good + "\n" + R"({"id": "b", "prompt": "q", "answer": ""})" + "\n" + good
                                  << "line 3"
                                  << "duplicate id \"a\" (first on line 1)";
    QTest::newRow("late header") << good + "\n{\"prompt_template\": \"{prompt}\"}"
                                 << "line 2"
                                 << "may only be the first line";
    QTest::newRow("header with extra key") << R"({"prompt_template": "{prompt}", "id": "a"})"
                                           << "line 1"
                                           << "holds only";
    QTest::newRow("header with bad template") << "{\"prompt_template\": \"{question}\"}\n" + good << "line 1"
                                              << "unknown placeholder {question}";
    QTest::newRow("empty file") << ""
                                << ""
                                << "no prompts";
    QTest::newRow("blank lines only") << "\n  \n\n"
                                      << ""
                                      << "no prompts";
    QTest::newRow("header only") << "{\"prompt_template\": \"Q {prompt}\"}\n"
                                 << ""
                                 << "no prompts";
}

void TestIo::loaderReportsLine()
{
    QFETCH(QString, text);
    QFETCH(QString, location);
    QFETCH(QString, detail);
    QTemporaryDir directory;
    const QString path = directory.filePath("set.jsonl");
    writeFile(path, text.toStdString());
    try {
        loadPromptSet(path.toStdString());
        QFAIL("no InputError");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.file()), path);
        QCOMPARE(QString::fromStdString(error.location()), location);
        QVERIFY2(QString::fromStdString(error.detail()).contains(detail), error.what());
    }
}

void TestIo::loaderAcceptsHeaderBlankLinesAndCrlf()
{
    const std::string text = "{\"prompt_template\": \"Question: {prompt}\\nAnswer:\"}\r\n"
                             "\r\n"
                             "{\"answer\": \"2\", \"prompt\": \"1+1\", \"id\": \"x\"}\r\n"
                             "{\"id\": \"y\", \"prompt\": \"caf\\u00e9 {x}\", \"answer\": \"\"}";
    const PromptSet set = parsePromptSet(text, "/data/sets/mine.jsonl");
    QCOMPARE(set.name, std::string("mine"));
    QCOMPARE(set.prompts.size(), size_t(2));
    QCOMPARE(set.prompts[0].id, std::string("x"));
    QCOMPARE(set.prompts[0].answer, std::string("2"));
    QCOMPARE(renderPrompt(set, set.prompts[0]), std::string("Question: 1+1\nAnswer:"));
    // Braces inside a prompt are data, not placeholders.
    QCOMPARE(renderPrompt(set, set.prompts[1]), std::string("Question: caf\xc3\xa9 {x}\nAnswer:"));
}

void TestIo::templates_data()
{
    QTest::addColumn<QString>("promptTemplate");
    QTest::addColumn<QString>("prompt");
    QTest::addColumn<QString>("rendered");
    QTest::newRow("identity") << "{prompt}"
                              << "Q:1+2\n"
                              << "Q:1+2\n";
    QTest::newRow("around") << "Question: {prompt}\nAnswer:"
                            << "2*3"
                            << "Question: 2*3\nAnswer:";
    QTest::newRow("twice") << "{prompt} / {prompt}"
                           << "x"
                           << "x / x";
    QTest::newRow("escaped braces") << "{{\"q\": \"{prompt}\"}}"
                                    << "7"
                                    << "{\"q\": \"7\"}";
    QTest::newRow("prompt with braces") << "<{prompt}>"
                                        << "{prompt}"
                                        << "<{prompt}>";
}

void TestIo::templates()
{
    QFETCH(QString, promptTemplate);
    QFETCH(QString, prompt);
    QFETCH(QString, rendered);
    validatePromptTemplate(promptTemplate.toStdString());
    QCOMPARE(QString::fromStdString(applyPromptTemplate(promptTemplate.toStdString(), prompt.toStdString())), rendered);
}

void TestIo::badTemplates_data()
{
    QTest::addColumn<QString>("promptTemplate");
    QTest::addColumn<QString>("detail");
    QTest::newRow("unknown placeholder") << "Q: {question}"
                                         << "column 4 of the prompt template: unknown placeholder";
    QTest::newRow("no placeholder") << "Answer:"
                                    << "no {prompt} placeholder";
    QTest::newRow("unclosed") << "{prompt} {"
                              << "column 10 of the prompt template: unclosed '{'";
    QTest::newRow("stray close") << "{prompt} }"
                                 << "column 10 of the prompt template: unmatched '}'";
    QTest::newRow("case matters") << "{Prompt}"
                                  << "unknown placeholder {Prompt}";
}

void TestIo::badTemplates()
{
    QFETCH(QString, promptTemplate);
    QFETCH(QString, detail);
    try {
        validatePromptTemplate(promptTemplate.toStdString(), "--template");
        QFAIL("no InputError");
    } catch (const InputError& error) {
        QCOMPARE(QString::fromStdString(error.file()), QString("--template"));
        QVERIFY2(QString::fromStdString(error.detail()).contains(detail), error.what());
    }
    QVERIFY_THROWS_EXCEPTION(InputError, applyPromptTemplate(promptTemplate.toStdString(), "x"));
}

void TestIo::writerRoundTripsAndLeavesNoTemporary()
{
    QTemporaryDir directory;
    const std::string path = directory.filePath("out.jsonl").toStdString();
    PromptSet set;
    set.promptTemplate = "Question: {prompt}\nAnswer:";
    set.prompts = {{"b", "line one\nline \"two\"", "42"}, {"a", "caf\xc3\xa9", ""}};
    writePromptSet(set, path);
    QVERIFY(!QFile::exists(QString::fromStdString(path + ".tmp")));
    const PromptSet loaded = loadPromptSet(path);
    QCOMPARE(loaded.promptTemplate, set.promptTemplate);
    QCOMPARE(loaded.prompts.size(), size_t(2));
    for (size_t i = 0; i < 2; ++i) {
        QCOMPARE(loaded.prompts[i].id, set.prompts[i].id);
        QCOMPARE(loaded.prompts[i].prompt, set.prompts[i].prompt);
        QCOMPARE(loaded.prompts[i].answer, set.prompts[i].answer);
    }
    // Keys in reading order, one line per prompt after the header.
    const std::string text = readFile(QString::fromStdString(path));
    QVERIFY(text.find(R"({"id":"b","prompt":"line one\nline \"two\"","answer":"42"})") != std::string::npos);
    QCOMPARE(std::count(text.begin(), text.end(), '\n'), std::ptrdiff_t(3));
    // The identity template writes no header.
    set.promptTemplate = kIdentityPromptTemplate;
    writePromptSet(set, path);
    QCOMPARE(readFile(QString::fromStdString(path)).rfind("{\"id\":\"b\"", 0), size_t(0));
}

void TestIo::writerRefusesInvalidSetAndKeepsOldFile()
{
    QTemporaryDir directory;
    const QString path = directory.filePath("keep.jsonl");
    writeFile(path, "old contents\n");
    PromptSet duplicate;
    duplicate.prompts = {{"a", "p", "1"}, {"a", "q", "2"}};
    QVERIFY_THROWS_EXCEPTION(InputError, writePromptSet(duplicate, path.toStdString()));
    QVERIFY_THROWS_EXCEPTION(InputError, writePromptSet(PromptSet {}, path.toStdString()));
    PromptSet badUtf8;
    badUtf8.prompts = {{"a", "\xff\xfe", "1"}};
    QVERIFY_THROWS_EXCEPTION(InputError, writePromptSet(badUtf8, path.toStdString()));
    QCOMPARE(readFile(path), std::string("old contents\n"));
    // A directory that does not exist.
    PromptSet good;
    good.prompts = {{"a", "p", "1"}};
    QVERIFY_THROWS_EXCEPTION(InputError, writePromptSet(good, directory.filePath("missing/x.jsonl").toStdString()));
}

void TestIo::checkCommand()
{
    QTemporaryDir directory;
    std::string out;
    std::string err;
    const std::string heldout = std::string(MISMATCH_SOURCE_DIR) + "/resources/prompts/arith-heldout.jsonl";
    QCOMPARE(runCli({"--json", "prompts", "check", heldout, "--task", "arith"}, out, err), 0);
    const auto report = nlohmann::json::parse(out);
    QCOMPARE(report["prompts"].get<int>(), 512);
    QVERIFY(report["longest_prompt_and_solution_chars"].get<int>() <= 48);

    QCOMPARE(runCli({"prompts", "check", heldout, "--template", "Solve: {prompt}"}, out, err), 0);
    QVERIFY2(QString::fromStdString(out).contains("512 prompts"), out.c_str());
    QCOMPARE(runCli({"prompts", "check", heldout, "--template", "Solve: {problem}"}, out, err), 1);
    QVERIFY2(QString::fromStdString(err).contains("--template"), err.c_str());

    const QString bad = directory.filePath("bad.jsonl");
    writeFile(bad, "{\"id\": \"a\", \"prompt\": \"p\", \"answer\": \"1\"}\n\n{\"id\": \"a\"}\n");
    QCOMPARE(runCli({"prompts", "check", bad.toStdString()}, out, err), 1);
    QVERIFY2(QString::fromStdString(err).contains(bad + ":line 3:"), err.c_str());

    // --task arith catches an answer that does not match the worked solution.
    const QString wrong = directory.filePath("wrong.jsonl");
    writeFile(wrong, "{\"id\": \"a\", \"prompt\": \"Q:2+3\\n\", \"answer\": \"6\"}\n");
    QCOMPARE(runCli({"prompts", "check", wrong.toStdString()}, out, err), 0);
    QCOMPARE(runCli({"prompts", "check", wrong.toStdString(), "--task", "arith"}, out, err), 1);
    QVERIFY2(QString::fromStdString(err).contains("prompt \"a\""), err.c_str());
}

void TestIo::demoTokenizerJson()
{
    const auto tokenizer = nlohmann::json::parse(io::demoTokenizerJson());
    const auto& model = tokenizer["model"];
    QCOMPARE(model["type"].get<std::string>(), std::string("BPE"));
    QVERIFY(model["merges"].is_array() && model["merges"].empty());
    const auto& vocabulary = model["vocab"];
    QCOMPARE(vocabulary.size(), size_t(256));
    const std::vector<unsigned> codePoints = gpt2BytesToUnicode();
    for (unsigned byte = 0; byte < 256; ++byte) {
        // The expected symbol, UTF-8 encoded by Qt from the code point.
        const std::string symbol = QString(QChar(static_cast<char16_t>(codePoints[byte]))).toStdString();
        QVERIFY2(vocabulary.contains(symbol), qPrintable(QString("byte %1").arg(byte)));
        QCOMPARE(vocabulary[symbol].get<unsigned>(), byte);
        QCOMPARE(byteLevelSymbol(static_cast<unsigned char>(byte)), symbol);
    }
    QCOMPARE(byteLevelSymbol('\n'), std::string("\xc4\x8a")); // "Ċ"
    QCOMPARE(byteLevelSymbol(' '), std::string("\xc4\xa0")); // "Ġ"

    const auto& added = tokenizer["added_tokens"];
    QCOMPARE(added.size(), size_t(2));
    QCOMPARE(added[0]["id"].get<int>(), kDemoEndOfTextId);
    QCOMPARE(added[0]["content"].get<std::string>(), std::string("<|endoftext|>"));
    QCOMPARE(added[1]["id"].get<int>(), kDemoBeginOfSequenceId);
    QCOMPARE(added[1]["content"].get<std::string>(), std::string("<|bos|>"));
    for (const auto& token : added) {
        QVERIFY(token["special"].get<bool>());
        QVERIFY(!vocabulary.contains(token["content"].get<std::string>()));
    }
    QCOMPARE(kDemoVocabularySize, 258);
    for (const char* part : {"pre_tokenizer", "decoder"}) {
        QCOMPARE(tokenizer[part]["type"].get<std::string>(), std::string("ByteLevel"));
        QCOMPARE(tokenizer[part]["add_prefix_space"].get<bool>(), false);
        QCOMPARE(tokenizer[part]["use_regex"].get<bool>(), false);
    }
}

void TestIo::yamlReaderLocatesNestedEntries()
{
    // Lines and columns counted by hand, 1-based: `inner` stands at line 2, column 3; `b` at line 4, column 5 and
    // its value `x` at column 8; `empty` has no value, so its value is placed at its key.
    const std::string text = "outer:\n  inner:\n    a: 1\n    b: x\n  empty:\n";
    const YAML::Node root = io::loadYaml(text, "nested.yaml");
    const io::YamlMappingReader reader(throwReaderFailure());
    const auto top = reader.entries(root, io::locate(root, ""), {"outer"});
    QCOMPARE(top.size(), size_t(1));
    const io::YamlEntry& outer = reader.require(top, "outer", io::locate(root, ""));
    QCOMPARE(outer.keyLocation.keyPath, std::string("outer"));
    QCOMPARE(outer.keyLocation.line, 1);
    QCOMPARE(outer.keyLocation.column, 1);
    const auto middle = reader.entries(outer.value, outer.valueLocation, {"inner", "empty"});
    QCOMPARE(middle.size(), size_t(2));
    const io::YamlEntry* inner = io::YamlMappingReader::find(middle, "inner");
    QVERIFY(inner);
    QCOMPARE(inner->keyLocation.keyPath, std::string("outer.inner"));
    QCOMPARE(inner->keyLocation.line, 2);
    QCOMPARE(inner->keyLocation.column, 3);
    const io::YamlEntry* empty = io::YamlMappingReader::find(middle, "empty");
    QVERIFY(empty);
    QVERIFY(empty->value.IsNull());
    QCOMPARE(empty->valueLocation.keyPath, std::string("outer.empty"));
    QCOMPARE(empty->valueLocation.line, 5);
    QCOMPARE(empty->valueLocation.column, 3);
    QVERIFY(!io::YamlMappingReader::find(middle, "a"));

    const auto leaves = reader.entries(inner->value, inner->valueLocation, {"a", "b"});
    QCOMPARE(leaves.size(), size_t(2));
    QCOMPARE(leaves[0].key, std::string("a")); // file order
    const io::YamlEntry& b = leaves[1];
    QCOMPARE(b.keyLocation.keyPath, std::string("outer.inner.b"));
    QCOMPARE(b.keyLocation.line, 4);
    QCOMPARE(b.keyLocation.column, 5);
    QCOMPARE(b.valueLocation.line, 4);
    QCOMPARE(b.valueLocation.column, 8);
    QCOMPARE(reader.stringValue(b), std::string("x"));
    QCOMPARE(io::lineColumn(b.valueLocation), std::string("line 4, column 8"));
    QCOMPARE(io::describeLocation(b.valueLocation), std::string("line 4, column 8"));
    QCOMPARE(io::describeLocation(io::SourceLocation {"rules[2].weights", 0, 0}), std::string("rules[2].weights"));
    QCOMPARE(io::describeLocation(io::SourceLocation {}), std::string("an unknown place"));
}

void TestIo::yamlReaderRefusesDuplicateKeyNamingBothPlaces()
{
    const std::string text = "run:\n  seed: 1\n  steps: 2\n  seed: 3\n";
    const YAML::Node root = io::loadYaml(text, "dup.yaml");
    const io::YamlMappingReader reader(throwReaderFailure());
    const auto top = reader.entries(root, io::locate(root, ""), {"run"});
    const ReaderFailure failure = readerFailure([&] { reader.entries(top[0].value, top[0].valueLocation, {"seed", "steps"}); });
    // Placed at the second `seed` (line 4, column 3), naming the first (line 2, column 3).
    QCOMPARE(failure.detail, std::string("duplicate key 'seed' (first given at line 2, column 3)"));
    QCOMPARE(failure.where.keyPath, std::string("run.seed"));
    QCOMPARE(failure.where.line, 4);
    QCOMPARE(failure.where.column, 3);
}

void TestIo::yamlReaderRefusesMissingKeyAndWrongKinds()
{
    const io::YamlMappingReader reader(throwReaderFailure());
    {
        const YAML::Node root = io::loadYaml("a: 1\n", "missing.yaml");
        const io::SourceLocation top = io::locate(root, "");
        const auto list = reader.entries(root, top, {"a", "b"});
        const ReaderFailure failure = readerFailure([&] { reader.require(list, "b", top); });
        QCOMPARE(failure.detail, std::string("missing required key 'b'"));
        QCOMPARE(failure.where.line, 1);
        QCOMPARE(failure.where.column, 1);
        QCOMPARE(failure.where.keyPath, std::string());
    }
    {
        // A string is expected; 12 is an integer. The value stands at line 2, column 9.
        const YAML::Node root = io::loadYaml("x: a\nname:   12\n", "kind.yaml");
        const auto list = reader.entries(root, io::locate(root, ""), {"x", "name"});
        const ReaderFailure failure = readerFailure([&] { reader.stringValue(list[1]); });
        QCOMPARE(failure.detail, std::string("expected a string, got an integer"));
        QCOMPARE(failure.where.keyPath, std::string("name"));
        QCOMPARE(failure.where.line, 2);
        QCOMPARE(failure.where.column, 9);
    }
    {
        const YAML::Node root = io::loadYaml("- a\n- b\n", "list.yaml");
        const ReaderFailure failure = readerFailure([&] { reader.entries(root, io::SourceLocation {"top", 1, 1}, {"a"}); });
        QCOMPARE(failure.detail, std::string("expected a mapping, got a list"));
        QCOMPARE(failure.where.keyPath, std::string("top"));
    }
    for (const char* text : {"~: 1\n", "[a, b]: 1\n"}) {
        const YAML::Node root = io::loadYaml(text, "key.yaml");
        const ReaderFailure failure = readerFailure([&] { reader.entries(root, io::locate(root, ""), {"a"}); });
        QVERIFY2(failure.detail.rfind("expected a key name, got ", 0) == 0, failure.detail.c_str());
        QCOMPARE(failure.where.line, 1);
        QCOMPARE(failure.where.column, 1);
    }
    // A Fail that does not throw is a programming error, not a silent pass.
    const io::YamlMappingReader careless([](const io::SourceLocation&, const std::string&) {});
    const YAML::Node root = io::loadYaml("a: 1\n", "careless.yaml");
    QVERIFY_EXCEPTION_THROWN(careless.entries(root, io::locate(root, ""), {"b"}), std::logic_error);
}

void TestIo::yamlReaderPlacesUnknownKeyAtKeyOrMapping()
{
    const std::string text = "weights:\n  format: int8\n  granularty: channel\n";
    const YAML::Node root = io::loadYaml(text, "unknown.yaml");
    for (const auto at : {io::YamlMappingReader::UnknownKeyAt::Key, io::YamlMappingReader::UnknownKeyAt::Mapping}) {
        const io::YamlMappingReader reader(throwReaderFailure(), at);
        const auto top = reader.entries(root, io::locate(root, ""), {"weights"});
        const ReaderFailure failure
            = readerFailure([&] { reader.entries(top[0].value, top[0].valueLocation, {"format", "granularity"}); });
        QCOMPARE(failure.detail, std::string("unknown key 'granularty' in weights (expected one of: format, granularity)"));
        QCOMPARE(failure.where.keyPath,
            std::string(at == io::YamlMappingReader::UnknownKeyAt::Key ? "weights.granularty" : "weights"));
        QCOMPARE(failure.where.line, 3);
        QCOMPARE(failure.where.column, 3);
    }
    // At the top level the message names no mapping.
    const YAML::Node flat = io::loadYaml("nmae: x\n", "flat.yaml");
    const io::YamlMappingReader reader(throwReaderFailure());
    const ReaderFailure failure = readerFailure([&] { reader.entries(flat, io::locate(flat, ""), {"name", "version"}); });
    QCOMPARE(failure.detail, std::string("unknown key 'nmae' (expected one of: name, version)"));
    QCOMPARE(failure.where.keyPath, std::string("nmae"));
}

MISMATCH_TEST_MAIN(TestIo)
#include "test_io.moc"
