// core/common: Progress::child (fractions mapped into the parent's range, stage labels, one cancel flag shared
// both ways); FNV-1a against the published test vectors and a naive loop; the atomic file writer (whole file or
// nothing, the system's reason named); byte sizes as text; glibc's allocator mapping blocks from the fixed threshold
// that limitAllocatorRetention sets.
#include "core/common/byte_size.h"
#include "core/common/device.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/hash.h"
#include "core/common/message_text.h"
#include "core/common/output_check.h"
#include "core/common/progress.h"
#include "core/common/runtime.h"
#include "core/common/spill_file.h"
#include "core/model/transformer.h"
#include "core/store/sqlite_util.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>

#include <QDir>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdlib>
#include <cstring>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace mismatch;

class TestCommon : public QObject {
    Q_OBJECT

private slots:
    void childMapsFractionsIntoItsRange();
    void childSharesTheCancelFlagBothWays();
    void fnv1aMatchesTheReference();
    void atomicWriterWritesWholeOrNothing();
    void atomicWriterNamesTheSystemsReason();
    void atomicWriterStreamsToAFifoInsteadOfReplacingIt();
    void processSetUpIgnoresTheFileSizeSignal();
    void outputNamingAnInputIsRefused();
    void byteSizesAsText();
    void longValuesAndLibraryTextsInMessages();
    void workspaceErrorsSayWhatTheyMeanWithoutSourcePaths();
    void genericOpenBlasCoresAreReplaced();
    void allocatorMapsBlocksFromItsFixedThreshold();
    void devicesAreParsedAndChecked();
    void spillFileGivesBackWhatWasPutAside();
    void spillRefusesMemoryAndFullDirectories();
    void includesFollowTheLayers();
    void longFunctionsSayWhy();
};

void TestCommon::childMapsFractionsIntoItsRange()
{
    std::vector<std::pair<double, std::string>> seen;
    Progress parent([&seen](double fraction, const std::string& stage) { seen.emplace_back(fraction, stage); });
    {
        Progress child = parent.child(0.25, 0.75, "run 2");
        child.update(0.0, "loading");
        child.update(0.5, "step 5");
        child.setFraction(1.0);
        child.setStage("evaluating");
        // The child's own fraction is its own: 0..1.
        QCOMPARE(child.fraction(), 1.0);
    }
    // By hand: 0.25 + 0.5 * f for f = 0, 0.5, 1, 1 (setStage keeps the child's fraction).
    const std::vector<std::pair<double, std::string>> expected
        = {{0.25, "run 2: loading"}, {0.5, "run 2: step 5"}, {0.75, "run 2: step 5"}, {0.75, "run 2: evaluating"}};
    QCOMPARE(seen.size(), expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
        QCOMPARE(seen[i].first, expected[i].first);
        QCOMPARE(seen[i].second, expected[i].second);
    }
    QCOMPARE(parent.fraction(), 0.75);

    // No label: the child's stage text as it is; a child of a child maps through both ranges.
    seen.clear();
    Progress child = parent.child(0.5, 1.0, "");
    Progress grandchild = child.child(0.0, 0.5, "inner");
    grandchild.update(0.5, "x");
    // By hand: the grandchild's 0.5 is the child's 0.25, the parent's 0.5 + 0.5 * 0.25 = 0.625.
    QCOMPARE(seen.size(), std::size_t(1));
    QCOMPARE(seen[0].first, 0.625);
    QCOMPARE(seen[0].second, std::string("inner: x"));
    QCOMPARE(child.fraction(), 0.25);
}

void TestCommon::childSharesTheCancelFlagBothWays()
{
    {
        Progress parent;
        Progress child = parent.child(0.0, 1.0, "a");
        QVERIFY(!child.cancelled());
        parent.cancel();
        QVERIFY(child.cancelled());
        QVERIFY_THROWS_EXCEPTION(CancelledError, child.checkCancelled());
    }
    {
        Progress parent;
        Progress child = parent.child(0.0, 1.0, "a");
        Progress grandchild = child.child(0.0, 1.0, "b");
        grandchild.cancel();
        QVERIFY(child.cancelled());
        QVERIFY(parent.cancelled());
        QVERIFY_THROWS_EXCEPTION(CancelledError, parent.checkCancelled());
    }
    {
        // Two independent progresses do not share anything.
        Progress one;
        Progress two;
        one.cancel();
        QVERIFY(!two.cancelled());
    }
}

namespace {

std::string readAll(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
}

QStringList entries(const QString& directory)
{
    return QDir(directory).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden);
}

}  // namespace

void TestCommon::fnv1aMatchesTheReference()
{
    // The published FNV-1a 64-bit test vectors (offset basis for "", then "a" and "foobar").
    QCOMPARE(fnv1a(std::string_view("")), std::uint64_t(0xcbf29ce484222325ULL));
    QCOMPARE(fnv1a(std::string_view("a")), std::uint64_t(0xaf63dc4c8601ec8cULL));
    QCOMPARE(fnv1a(std::string_view("foobar")), std::uint64_t(0x85944171f73967e8ULL));
    QCOMPARE(hex64(0xaf63dc4c8601ec8cULL), std::string("af63dc4c8601ec8c"));
    QCOMPARE(hex64(0x1ULL), std::string("0000000000000001"));
    // Fresh random bytes against a naive loop written from the definition (xor, then multiply by the prime), and
    // continuing a hash over two pieces equals hashing them together.
    std::mt19937_64 random(QRandomGenerator::global()->generate64());
    for (int trial = 0; trial < 20; ++trial) {
        std::string bytes(random() % 300, '\0');
        for (char& c : bytes) {
            c = static_cast<char>(random() & 0xFF);
        }
        std::uint64_t expected = 14695981039346656037ULL;
        for (const char c : bytes) {
            expected ^= static_cast<unsigned char>(c);
            expected *= 1099511628211ULL;
        }
        QCOMPARE(fnv1a(bytes.data(), bytes.size()), expected);
        const std::size_t cut = bytes.empty() ? 0 : random() % bytes.size();
        QCOMPARE(fnv1a(std::string_view(bytes).substr(cut), fnv1a(std::string_view(bytes).substr(0, cut))), expected);
    }
    // Parts are length-prefixed: ("ab", "c") and ("a", "bc") differ; an int64 part is its 8 bytes.
    Fnv1a one;
    one.add("ab");
    one.add("c");
    Fnv1a two;
    two.add("a");
    two.add("bc");
    QVERIFY(one.value() != two.value());
    const std::uint64_t two64 = 2;
    const std::int64_t value = 7;
    std::string framed(reinterpret_cast<const char*>(&two64), sizeof two64);
    framed += "ab";
    framed.append(reinterpret_cast<const char*>(&value), sizeof value);
    Fnv1a parts;
    parts.add("ab");
    parts.add(value);
    QCOMPARE(parts.value(), fnv1a(framed));
    QCOMPARE(parts.hex(), hex64(fnv1a(framed)));
}

void TestCommon::atomicWriterWritesWholeOrNothing()
{
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/out.txt").toStdString();
    std::ofstream(path) << "the old contents, longer than the new ones";
    writeFileAtomically(path, "new\n");
    QCOMPARE(readAll(path), std::string("new\n"));
    QCOMPARE(entries(dir.path()), QStringList {"out.txt"});
    {
        // Abandoned before commit (an exception or a cancel between writes): the old file stays, no temporary.
        AtomicFileWriter writer(path);
        writer.write("half of a new");
        QCOMPARE(entries(dir.path()), (QStringList {"out.txt", "out.txt.tmp"}));
    }
    QCOMPARE(readAll(path), std::string("new\n"));
    QCOMPARE(entries(dir.path()), QStringList {"out.txt"});
    // Pieces, binary bytes included, land in order.
    AtomicFileWriter writer(path);
    const char bytes[] = {'a', '\0', 'b'};
    writer.write(bytes, sizeof bytes);
    writer.write(std::string_view("cd"));
    writer.commit();
    QCOMPARE(readAll(path), std::string("a\0bcd", 5));
    // A directory that does not exist: InputError naming the path and the system's reason, nothing created.
    const std::string missing = (dir.path() + "/no-such-dir/out.txt").toStdString();
    try {
        writeFileAtomically(missing, "x");
        QFAIL("a file in a missing directory was written");
    } catch (const InputError& error) {
        QCOMPARE(error.file(), missing);
        QVERIFY2(error.detail().find("No such file or directory") != std::string::npos, error.what());
    }
    QCOMPARE(entries(dir.path()), QStringList {"out.txt"});
}

void TestCommon::atomicWriterStreamsToAFifoInsteadOfReplacingIt()
{
    // Issue 46: a non-regular output (a device, a FIFO) was replaced by the renamed temporary (as root /dev/full
    // became a regular file). A FIFO with a reader gets the bytes and stays a FIFO; without a reader it is refused
    // at once; no temporary is ever made beside it.
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/pipe").toStdString();
    QCOMPARE(::mkfifo(path.c_str(), 0600), 0);
    const int reader = ::open(path.c_str(), O_RDONLY | O_NONBLOCK);
    QVERIFY(reader >= 0);
    writeFileAtomically(path, "streamed\n");
    char buffer[64] = {};
    const ssize_t got = ::read(reader, buffer, sizeof buffer);
    ::close(reader);
    QCOMPARE(std::string(buffer, got > 0 ? static_cast<std::size_t>(got) : 0), std::string("streamed\n"));
    struct stat status {};
    QCOMPARE(::stat(path.c_str(), &status), 0);
    QVERIFY2(S_ISFIFO(status.st_mode), "the FIFO was replaced by a regular file");
    std::string caught;
    try {
        writeFileAtomically(path, "nobody reads\n");
    } catch (const InputError& error) {
        caught = error.what();
    }
    QVERIFY2(caught.find(path) != std::string::npos && caught.find("no process reads from it") != std::string::npos,
        caught.c_str());
    QCOMPARE(::stat(path.c_str(), &status), 0);
    QVERIFY(S_ISFIFO(status.st_mode));
    // Nothing beside it (entries() lists regular files only: a FIFO is a "system" entry to QDir).
    QCOMPARE(QDir(dir.path()).entryList(QDir::AllEntries | QDir::System | QDir::Hidden | QDir::NoDotAndDotDot),
        QStringList {"pipe"});
}

void TestCommon::processSetUpIgnoresTheFileSizeSignal()
{
    // Issue 46: `mismatch generate -o OUT` under `ulimit -f 0` died from SIGXFSZ. The set-up both programs call
    // first ignores it, whatever the environment (argv == nullptr: no re-execution).
    struct sigaction previous {};
    struct sigaction defaults {};
    defaults.sa_handler = SIG_DFL;
    QCOMPARE(::sigaction(SIGXFSZ, &defaults, &previous), 0);
    prepareProcessEnvironment(nullptr);
    struct sigaction now {};
    QCOMPARE(::sigaction(SIGXFSZ, nullptr, &now), 0);
    const bool ignoredByPrepare = now.sa_handler == SIG_IGN;
    ::sigaction(SIGXFSZ, &defaults, nullptr);
    initializeRuntime(at::get_num_threads()); // the thread count as it is
    QCOMPARE(::sigaction(SIGXFSZ, nullptr, &now), 0);
    const bool ignoredByInitialize = now.sa_handler == SIG_IGN;
    ::sigaction(SIGXFSZ, &previous, nullptr);
    QVERIFY(ignoredByPrepare);
    QVERIFY(ignoredByInitialize);
}

void TestCommon::outputNamingAnInputIsRefused()
{
    // Issue 46: the shared check every writer calls. Same file through a symlink and a hard link, a path that does
    // not exist yet naming an input, a file inside a model directory; the message names both.
    QTemporaryDir dir;
    const std::string root = dir.path().toStdString();
    const std::string model = root + "/m";
    std::filesystem::create_directories(model);
    std::ofstream(model + "/config.json") << "{}";
    std::ofstream(root + "/p.jsonl") << "{}";
    std::filesystem::create_symlink(root + "/p.jsonl", root + "/link.jsonl");
    std::filesystem::create_hard_link(model + "/config.json", root + "/hard.json");
    const auto refusal = [&](const std::string& output, const std::vector<NamedInput>& inputs,
                             const std::vector<std::string>& models) -> std::string {
        try {
            requireOutputNotInput(output, inputs, models);
        } catch (const InputError& error) {
            return error.what();
        }
        return "";
    };
    const std::string viaLink = refusal(root + "/link.jsonl", {{root + "/p.jsonl", "prompt set"}}, {});
    QVERIFY2(viaLink.find(root + "/link.jsonl") != std::string::npos
            && viaLink.find("prompt set " + root + "/p.jsonl") != std::string::npos,
        viaLink.c_str());
    QVERIFY(!refusal(root + "/sub/../p.jsonl", {{root + "/p.jsonl", "prompt set"}}, {}).empty());
    QVERIFY(!refusal(root + "/new.jsonl", {{root + "/./new.jsonl", "recipe"}}, {}).empty()); // neither exists yet
    QVERIFY(!refusal(model + "/model.safetensors", {}, {model}).empty()); // inside, not there yet
    QVERIFY(!refusal(root + "/hard.json", {}, {model}).empty()); // another name of the model's file
    QVERIFY(!refusal(model, {}, {model}).empty());
    QCOMPARE(refusal(root + "/out.jsonl", {{root + "/p.jsonl", "prompt set"}, {"", "unset"}}, {model, ""}),
        std::string());
    QCOMPARE(refusal(root + "/m2/x", {}, {model}), std::string()); // a sibling whose name starts the same
}

void TestCommon::atomicWriterNamesTheSystemsReason()
{
    // A write the system refuses (a file size limit, as a full disk would): InputError with the reason, the old
    // file as it was, no temporary left. SIGXFSZ ignored, as main() does, so that the write fails instead.
    QTemporaryDir dir;
    const std::string path = (dir.path() + "/big.bin").toStdString();
    std::ofstream(path) << "old";
    const auto previousHandler = std::signal(SIGXFSZ, SIG_IGN);
    rlimit previous {};
    QCOMPARE(::getrlimit(RLIMIT_FSIZE, &previous), 0);
    rlimit limited = previous;
    limited.rlim_cur = 4096;
    QCOMPARE(::setrlimit(RLIMIT_FSIZE, &limited), 0);
    std::string caught;
    try {
        writeFileAtomically(path, std::string(1 << 20, 'x'));
    } catch (const InputError& error) {
        caught = error.detail();
    }
    ::setrlimit(RLIMIT_FSIZE, &previous);
    std::signal(SIGXFSZ, previousHandler);
    QVERIFY2(caught.find("File too large") != std::string::npos, caught.c_str());
    QCOMPARE(readAll(path), std::string("old"));
    QCOMPARE(entries(dir.path()), QStringList {"big.bin"});
}

// Issue 46: messages print 10,000 dimensions or a megabyte value whole, and nlohmann's "[json.exception...]" tag.
void TestCommon::longValuesAndLibraryTextsInMessages()
{
    QCOMPARE(cutText("short"), std::string("short"));
    const std::string megabyte(1 << 20, 'x');
    QCOMPARE(cutText(megabyte), std::string(kMessageValueChars, 'x') + "... (1048576 bytes)");
    // A cut never splits a UTF-8 character: "é" is 2 bytes, so 3 bytes of "ééé" keep one character.
    QCOMPARE(cutText("\xc3\xa9\xc3\xa9\xc3\xa9", 3), std::string("\xc3\xa9... (6 bytes)"));
    const std::vector<std::int64_t> few {2, 3};
    QCOMPARE(shapeText(few), std::string("[2, 3]"));
    const std::vector<std::int64_t> many(10000, 1);
    QCOMPARE(shapeText(many), std::string("[1, 1, 1, 1, 1, 1, 1, 1, ... (10000 dimensions)]"));
    // An error whose value is a megabyte keeps its start (what is wrong) and its end (what was expected).
    const InputError error("f.yaml", "line 2", "name '" + megabyte + "' is too long; expected at most 64 bytes");
    QVERIFY(error.detail().size() <= kMessageChars + 64);
    QVERIFY(QString::fromStdString(error.detail()).startsWith("name 'xxx"));
    QVERIFY(QString::fromStdString(error.detail()).endsWith("' is too long; expected at most 64 bytes"));
    QVERIFY(std::string(error.what()).find("bytes left out") != std::string::npos);
    try {
        (void)nlohmann::json::parse("{\"a\": tru}");
        QFAIL("malformed JSON parsed");
    } catch (const nlohmann::json::exception& parseError) {
        const std::string detail = jsonErrorDetail(parseError);
        QVERIFY2(detail.rfind("parse error at line 1, column ", 0) == 0, detail.c_str());
        QVERIFY2(detail.find("[json.exception") == std::string::npos, detail.c_str());
    }
    // Numbers as given, the shortest text that reads back to the same double (std::to_chars' round trip), not
    // std::to_string's six decimals ("1000000000000000019884624838656.000000" for 1e30).
    QCOMPARE(numberText(1e39), std::string("1e+39"));
    QCOMPARE(numberText(100.0), std::string("100"));
    QCOMPARE(numberText(0.05), std::string("0.05"));
    QCOMPARE(std::stod(numberText(0.1 + 0.2)), 0.1 + 0.2);
}

// A failed SQLite call says what it means for the workspace first, then SQLite's text, its call and code; never
// the tool's source file (issue 46: "SQLite code 1811 in sqlite3_step at .../sqlite_util.cpp:105").
void TestCommon::workspaceErrorsSayWhatTheyMeanWithoutSourcePaths()
{
    QTemporaryDir dir;
    const std::string path = dir.path().toStdString() + "/w.db";
    sqlite3* db = nullptr;
    QCOMPARE(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_extended_result_codes(db, 1); // as the store opens its workspaces
    try {
        store::Statement(db, "CREATE TABLE t (x INTEGER UNIQUE)").run();
        store::Statement(db, "INSERT INTO t VALUES (1)").run();
        store::Statement(db, "INSERT INTO t VALUES (1)").run();
        QFAIL("a duplicate value was inserted");
    } catch (const StoreError& error) {
        const std::string text = error.what();
        QVERIFY2(text.find("the workspace refused a record that conflicts with one it holds: UNIQUE constraint failed")
                != std::string::npos,
            text.c_str());
        QVERIFY2(text.find("(SQLite code 2067 in sqlite3_step)") != std::string::npos, text.c_str()); // SQLITE_CONSTRAINT_UNIQUE
        QVERIFY2(text.find(".cpp") == std::string::npos, text.c_str());
    }
    sqlite3_close(db);
}

void TestCommon::byteSizesAsText()
{
    // By hand: the largest binary unit that keeps the value >= 1; whole values without decimals.
    QCOMPARE(formatByteSize(0), std::string("0 B"));
    QCOMPARE(formatByteSize(1023), std::string("1023 B"));
    QCOMPARE(formatByteSize(1024), std::string("1 KiB"));
    QCOMPARE(formatByteSize(1536), std::string("1.50 KiB"));
    QCOMPARE(formatByteSize(std::uint64_t(3) << 29), std::string("1.50 GiB"));
    QCOMPARE(formatByteSize(std::uint64_t(8) << 30), std::string("8 GiB"));
    QCOMPARE(formatByteSize(std::uint64_t(2048) << 40), std::string("2048 TiB"));
    // What it prints reads back as the same size when whole.
    for (const std::uint64_t bytes : {std::uint64_t(1) << 20, std::uint64_t(5) << 30, std::uint64_t(700)}) {
        QCOMPARE(parseByteSize(formatByteSize(bytes)), bytes);
    }
}

void TestCommon::genericOpenBlasCoresAreReplaced()
{
    // The SSE-era fallbacks of OpenBLAS's dynamic dispatch are replaced by the widest kernels the CPU runs.
    QCOMPARE(openblasCoreChoice("Prescott", true, true), std::string("SkylakeX"));
    QCOMPARE(openblasCoreChoice("PRESCOTT", false, true), std::string("Haswell"));
    QCOMPARE(openblasCoreChoice("Nehalem", false, true), std::string("Haswell"));
    QCOMPARE(openblasCoreChoice("Core2", true, false), std::string("SkylakeX"));
    // A CPU without AVX2 keeps what it has; a recognised core, or no OpenBLAS at all, is left alone.
    QCOMPARE(openblasCoreChoice("Prescott", false, false), std::string());
    QCOMPARE(openblasCoreChoice("SkylakeX", true, true), std::string());
    QCOMPARE(openblasCoreChoice("Zen", true, true), std::string());
    QCOMPARE(openblasCoreChoice("Haswell", true, true), std::string());
    QCOMPARE(openblasCoreChoice("", true, true), std::string());
}


namespace {

// Bytes glibc holds in blocks mapped on their own (mallinfo2's hblkhd).
std::size_t mappedBlockBytes()
{
#ifdef __GLIBC__
    return ::mallinfo2().hblkhd;
#else
    return 0;
#endif
}

// malloc'd and touched, so that the compiler cannot drop the allocation.
void* touchedBlock(std::size_t bytes)
{
    void* block = std::malloc(bytes);
    std::memset(block, 1, bytes);
    volatile unsigned char sink = static_cast<volatile unsigned char*>(block)[bytes - 1];
    (void)sink;
    return block;
}

} // namespace

// AddressSanitizer replaces malloc (mallopt and glibc's statistics then do not apply).
#if defined(__SANITIZE_ADDRESS__)
#define MISMATCH_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MISMATCH_TEST_ASAN 1
#endif
#endif

void TestCommon::allocatorMapsBlocksFromItsFixedThreshold()
{
#if !defined(__GLIBC__) || defined(MISMATCH_TEST_ASAN)
    QSKIP("glibc's allocator only (not under AddressSanitizer)");
#else
    if (std::getenv("MALLOC_MMAP_THRESHOLD_") != nullptr) {
        QVERIFY(!limitAllocatorRetention()); // the environment rules
        QSKIP("MALLOC_MMAP_THRESHOLD_ is set");
    }
    QVERIFY(limitAllocatorRetention());
    // A freed 30 MiB mapped block would raise glibc's dynamic threshold to 30 MiB, and a 20 MiB block would then
    // come from the heap (hblkhd unchanged), to stay resident when freed. With the threshold fixed at 16 MiB it is
    // mapped on its own and unmapped when freed.
    std::free(touchedBlock(30u << 20));
    const std::size_t before = mappedBlockBytes();
    void* large = touchedBlock(20u << 20);
    QVERIFY2(mappedBlockBytes() >= before + (20u << 20),
        (std::to_string(before) + " -> " + std::to_string(mappedBlockBytes())).c_str());
    std::free(large);
    QCOMPARE(mappedBlockBytes(), before);
    // Below the threshold (6 MiB), a heap block as before.
    void* small = touchedBlock(6u << 20);
    QCOMPARE(mappedBlockBytes(), before);
    std::free(small);
#endif
}

void TestCommon::devicesAreParsedAndChecked()
{
    const std::vector<std::string> available = availableDevices();
    QVERIFY(!available.empty());
    QCOMPARE(available.front(), std::string("cpu"));
    QCOMPARE(deviceDescriptions().size(), available.size());
    QVERIFY(parseDevice("cpu", "run.yaml", "device").is_cpu());
    QCOMPARE(deviceName(parseDevice("cpu", "run.yaml", "device")), std::string("cpu"));
    QCOMPARE(canonicalDevice("cuda", "f", "device"), std::string("cuda:0"));
    QCOMPARE(canonicalDevice("cuda:07", "f", "device"), std::string("cuda:7"));
    for (const char* bad : {"gpu", "CPU", "cuda:", "cuda:-1", "cuda:1x", "cuda:0:1", ""}) {
        try {
            canonicalDevice(bad, "run.yaml", "device");
            QFAIL(qPrintable(QString("accepted '%1'").arg(bad)));
        } catch (const InputError& error) {
            QCOMPARE(QString::fromStdString(error.file()), QString("run.yaml"));
            QCOMPARE(QString::fromStdString(error.location()), QString("device"));
            QCOMPARE(QString::fromStdString(error.detail()),
                QString("device '%1': expected cpu, cuda or cuda:N").arg(bad));
        }
    }
    // The first CUDA index this machine does not have: refused, naming what is available.
    std::string have;
    for (const std::string& name : available) {
        have += (have.empty() ? "" : ", ") + name;
    }
    const std::string missing = "cuda:" + std::to_string(available.size() - 1);
    try {
        parseDevice(missing, "job", "device");
        QFAIL("a missing CUDA device was accepted");
    } catch (const InputError& error) {
        QVERIFY2(error.detail().find("device '" + missing + "': ") == 0, error.detail().c_str());
        QVERIFY2(error.detail().find("; available: " + have) != std::string::npos, error.detail().c_str());
    }
    // A resume continues on the stored device when it is here, else on the CPU (never an error: the run's own
    // settings name it).
    QVERIFY(resumeDevice("cpu").is_cpu());
    QVERIFY(resumeDevice(missing).is_cpu());
    QVERIFY(resumeDevice("not a device").is_cpu());
    if (available.size() > 1) {
        QCOMPARE(deviceName(resumeDevice("cuda:0")), std::string("cuda:0"));
    }
    // Weights already on the device are the same tensors, not copies.
    model::TransformerWeights weights;
    weights.set("w", at::ones({2, 2}));
    QVERIFY(onDevice(weights, at::Device(at::kCPU)).get("w").is_same(weights.get("w")));
}

void TestCommon::spillFileGivesBackWhatWasPutAside()
{
    QTemporaryDir directory;
    QVERIFY(directory.isValid());
    const std::string path = directory.path().toStdString();
    std::vector<std::uint64_t> first(1 << 16);
    std::vector<std::uint64_t> second(3);
    std::mt19937_64 random(QRandomGenerator::global()->generate64());
    for (std::uint64_t& value : first) {
        value = random();
    }
    for (std::uint64_t& value : second) {
        value = random();
    }
    {
        SpillFile spill(path, "the test's bytes");
        // Unlinked at once: nothing in the directory by name.
        QCOMPARE(QDir(directory.path()).entryList(QDir::Files | QDir::Hidden).size(), 0);
        const std::uint64_t firstBytes = first.size() * sizeof(std::uint64_t);
        spill.write(0, first.data(), firstBytes);
        spill.write(firstBytes, second.data(), sizeof(std::uint64_t) * second.size());
        // Overwriting a part leaves the rest.
        const std::uint64_t replaced = ~first[5];
        spill.write(5 * sizeof(std::uint64_t), &replaced, sizeof replaced);
        first[5] = replaced;
        std::vector<std::uint64_t> back(first.size());
        spill.read(0, back.data(), firstBytes);
        QVERIFY(back == first);
        std::vector<std::uint64_t> backSecond(second.size());
        spill.read(firstBytes, backSecond.data(), sizeof(std::uint64_t) * second.size());
        QVERIFY(backSecond == second);
        // Reading past the end says what and where.
        std::uint64_t beyond = 0;
        try {
            spill.read(firstBytes + 2 * sizeof(std::uint64_t), &beyond, 2 * sizeof(std::uint64_t));
            QFAIL("a read past the end of the spill file succeeded");
        } catch (const Error& error) {
            const std::string what = error.what();
            QVERIFY2(what.find("the test's bytes") != std::string::npos, what.c_str());
            QVERIFY2(what.find("ends before them") != std::string::npos, what.c_str());
        }
    }
    QCOMPARE(QDir(directory.path()).entryList(QDir::Files | QDir::Hidden).size(), 0);
    try {
        SpillFile missing(path + "/no-such-directory", "the test's bytes");
        QFAIL("a spill file was created in a directory that does not exist");
    } catch (const Error& error) {
        const std::string what = error.what();
        QVERIFY2(what.find("no-such-directory") != std::string::npos, what.c_str());
    }
}

void TestCommon::spillRefusesMemoryAndFullDirectories()
{
    QTemporaryDir directory;
    QVERIFY(directory.isValid());
    const std::string path = directory.path().toStdString();
    std::string why;
    struct statfs system {};
    QVERIFY(::statfs(path.c_str(), &system) == 0);
    if (system.f_type != 0x01021994) { // the test's own directory is on a disk
        QVERIFY2(spillFits(path, 1 << 20, &why), why.c_str());
    }
    QVERIFY(!spillFits(path, std::uint64_t {1} << 62, &why));
    QVERIFY2(why.find("free") != std::string::npos, why.c_str());
    QVERIFY(!spillFits(path + "/no-such-directory", 1, &why));
    QVERIFY2(why.find("no-such-directory") != std::string::npos, why.c_str());
    // /dev/shm is a tmpfs on Linux systems that have it: spilling there would keep the bytes in memory.
    if (::statfs("/dev/shm", &system) == 0 && system.f_type == 0x01021994) {
        QVERIFY(!spillFits("/dev/shm", 1, &why));
        QVERIFY2(why.find("memory") != std::string::npos, why.c_str());
    }
    // $TMPDIR rules; else /var/tmp.
    const char* saved = std::getenv("TMPDIR");
    const std::string savedValue = saved ? saved : "";
    ::setenv("TMPDIR", path.c_str(), 1);
    QCOMPARE(spillDirectory(), path);
    ::unsetenv("TMPDIR");
    QCOMPARE(spillDirectory(), std::string("/var/tmp"));
    if (saved) {
        ::setenv("TMPDIR", savedValue.c_str(), 1);
    }
}

namespace {

// The layer order a file states on its line "Layers, lowest first: a < b, c < ...": module -> layer index.
std::map<std::string, int> statedLayers(const std::string& path, std::string* line)
{
    std::ifstream in(path);
    std::string text;
    const std::string marker = "Layers, lowest first: ";
    while (std::getline(in, text)) {
        const auto at = text.find(marker);
        if (at == std::string::npos) {
            continue;
        }
        *line = text.substr(at + marker.size());
        std::map<std::string, int> layers;
        int layer = 0;
        std::stringstream groups(*line);
        std::string group;
        while (std::getline(groups, group, '<')) {
            std::stringstream names(group);
            std::string name;
            while (std::getline(names, name, ',')) {
                name.erase(0, name.find_first_not_of(" `"));
                name.erase(name.find_last_not_of(" `.") + 1);
                layers[name] = layer;
            }
            ++layer;
        }
        return layers;
    }
    return {};
}

} // namespace

// docs/architecture.md and core/CMakeLists.txt state one layer order; every #include of the project's own headers
// in core/, cuda/, ui/ and app/ goes to the file's own module or to a lower layer. A violation is named by file and
// line. (Tests may include anything.)
void TestCommon::includesFollowTheLayers()
{
    namespace fs = std::filesystem;
    const std::string root = MISMATCH_SOURCE_DIR;
    std::string documented;
    std::string built;
    const std::map<std::string, int> layers = statedLayers(root + "/docs/architecture.md", &documented);
    QVERIFY2(!layers.empty(), "docs/architecture.md states no \"Layers, lowest first:\" line");
    statedLayers(root + "/core/CMakeLists.txt", &built);
    QCOMPARE(QString::fromStdString(built), QString::fromStdString(documented));
    // Every core module is placed.
    for (const auto& entry : fs::directory_iterator(root + "/core")) {
        if (entry.is_directory()) {
            QVERIFY2(layers.count(entry.path().filename().string()),
                ("core/" + entry.path().filename().string() + " is in no layer of the stated order").c_str());
        }
    }
    const std::regex include(R"(^\s*#\s*include\s+"(core/([a-z_]+)|cuda|ui|app)/)");
    std::vector<std::string> violations;
    std::size_t checked = 0;
    for (const std::string top : {"core", "cuda", "ui", "app"}) {
        for (const auto& entry : fs::recursive_directory_iterator(root + "/" + top)) {
            const std::string extension = entry.path().extension().string();
            if (!entry.is_regular_file() || (extension != ".h" && extension != ".cpp" && extension != ".cu")) {
                continue;
            }
            const std::string relative = fs::relative(entry.path(), root).string();
            const std::string module = top == "core" ? relative.substr(5, relative.find('/', 5) - 5) : top;
            std::ifstream in(entry.path());
            std::string line;
            int number = 0;
            while (std::getline(in, line)) {
                ++number;
                std::smatch match;
                if (!std::regex_search(line, match, include)) {
                    continue;
                }
                ++checked;
                const std::string target = match[2].matched ? match[2].str() : match[1].str();
                if (target == module) {
                    continue;
                }
                if (!layers.count(target) || layers.at(target) >= layers.at(module)) {
                    violations.push_back(relative + ":" + std::to_string(number) + ": " + module + " includes "
                        + target + (layers.count(target) ? " (not below it)" : " (in no layer)"));
                }
            }
        }
    }
    QVERIFY(checked > 500); // the walk found the sources
    std::string list;
    for (const std::string& violation : violations) {
        list += violation + "\n";
    }
    QVERIFY2(violations.empty(), ("includes against the layer order " + documented + ":\n" + list).c_str());
}

namespace {

// `source` with comments and string / character literals blanked (newlines kept), so that braces in them do not
// count.
std::string codeOnly(const std::string& source)
{
    std::string out;
    out.reserve(source.size());
    std::size_t i = 0;
    const std::size_t n = source.size();
    while (i < n) {
        if (source.compare(i, 2, "//") == 0) {
            while (i < n && source[i] != '\n') {
                ++i;
            }
        } else if (source.compare(i, 2, "/*") == 0) {
            const std::size_t end = std::min(n, source.find("*/", i + 2) == std::string::npos ? n : source.find("*/", i + 2) + 2);
            out.append(static_cast<std::size_t>(std::count(source.begin() + static_cast<std::ptrdiff_t>(i),
                           source.begin() + static_cast<std::ptrdiff_t>(end), '\n')),
                '\n');
            i = end;
        } else if (source.compare(i, 2, "R\"") == 0) {
            const std::size_t open = source.find('(', i + 2);
            const std::string close = ")" + source.substr(i + 2, open - i - 2) + "\"";
            const std::size_t found = source.find(close, open);
            const std::size_t end = found == std::string::npos ? n : found + close.size();
            out += "\"\"";
            out.append(static_cast<std::size_t>(std::count(source.begin() + static_cast<std::ptrdiff_t>(i),
                           source.begin() + static_cast<std::ptrdiff_t>(end), '\n')),
                '\n');
            i = end;
        } else if (source[i] == '"' || (source[i] == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(source[i - 1]))))) {
            // A ' after a hex digit is a digit separator (1'000), not a character literal.
            const char quote = source[i];
            std::size_t j = i + 1;
            while (j < n && source[j] != quote && source[j] != '\n') {
                j += source[j] == '\\' ? 2 : 1;
            }
            out += quote;
            out += quote;
            i = j + 1;
        } else {
            out += source[i++];
        }
    }
    return out;
}

struct FunctionSpan {
    int firstLine; // the line its declaration starts on
    int lines; // from the opening brace's line to the closing brace's
};

// The function bodies of a C++ file (definitions at namespace or class scope; lambdas and blocks inside a function
// count as its lines), found by brace matching: a `{` opens a function when the text before it, since the last `;`,
// `{` or `}`, ends in `)` (with qualifiers or a trailing return type) or in a constructor's initializer list.
std::vector<FunctionSpan> functionSpans(const std::string& source)
{
    static const std::regex scope(R"(\b(namespace|class|struct|union|enum)\b[^()]*$)");
    static const std::regex function(R"(\)\s*((const|override|noexcept|final|mutable)\s*)*(->\s*[\w:<>, *&]+)?\s*$)");
    static const std::regex initializers(R"(\)\s*:\s*[\w:]+\s*[({].*$)");
    const std::string code = codeOnly(source);
    struct Open {
        bool isFunction;
        int line;
        int firstLine;
        bool isScope;
    };
    std::vector<Open> stack;
    std::vector<FunctionSpan> spans;
    std::size_t last = 0;
    int line = 1;
    for (std::size_t i = 0; i < code.size(); ++i) {
        const char c = code[i];
        if (c == '\n') {
            ++line;
        } else if (c == '{') {
            const bool inFunction = std::any_of(stack.begin(), stack.end(), [](const Open& o) { return o.isFunction; });
            std::string head = code.substr(last, i - last);
            int firstLine = line - static_cast<int>(std::count(head.begin(), head.end(), '\n'));
            // The declaration starts at its first non-blank character.
            for (const char h : head) {
                if (h == '\n') {
                    ++firstLine;
                } else if (!std::isspace(static_cast<unsigned char>(h))) {
                    break;
                }
            }
            std::replace(head.begin(), head.end(), '\n', ' ');
            const std::string tail = head.size() > 400 ? head.substr(head.size() - 400) : head;
            const bool isScope = !inFunction && std::regex_search(tail, scope);
            const bool isFunction = !inFunction && !isScope
                && (std::regex_search(tail, function) || std::regex_search(tail, initializers));
            stack.push_back({isFunction, line, firstLine, isScope});
            last = i + 1;
        } else if (c == '}') {
            if (!stack.empty()) {
                const Open open = stack.back();
                stack.pop_back();
                if (open.isFunction) {
                    spans.push_back({open.firstLine, line - open.line + 1});
                }
            }
            last = i + 1;
        } else if (c == ';' && (stack.empty() || stack.back().isScope)) {
            last = i + 1;
        }
    }
    return spans;
}

} // namespace

// CONTRIBUTING.md: no function over 150 lines without a comment saying why. Every function body in core/, cuda/,
// ui/, app/ and tests/ of more than kMostLines lines has, in the comment directly above its declaration, a line with
// "Long: " and the reason. A violation is named by file and line. The finder itself is checked on a known sample.
void TestCommon::longFunctionsSayWhy()
{
    namespace fs = std::filesystem;
    constexpr int kMostLines = 150;
    // The finder: two functions (one a constructor with an initializer list, one holding a lambda and a string with
    // a brace), a class with an inline method, a namespace.
    const std::string sample = "namespace a {\n"
                               "struct S {\n  int f() const { return 1; }\n};\n"
                               "S::S(int x) : x_(x)\n{\n  g();\n}\n"
                               "// comment {\n"
                               "void h(int y)\n{\n  auto l = [&] { return \"}\"; };\n  l();\n\n}\n"
                               "} // namespace a\n";
    const std::vector<FunctionSpan> found = functionSpans(sample);
    QCOMPARE(found.size(), std::size_t(3));
    QCOMPARE(found[0].firstLine, 3); // f, one line
    QCOMPARE(found[0].lines, 1);
    QCOMPARE(found[1].firstLine, 5); // S::S, lines 6-8
    QCOMPARE(found[1].lines, 3);
    QCOMPARE(found[2].firstLine, 10); // h, lines 11-15
    QCOMPARE(found[2].lines, 5);

    const std::string root = MISMATCH_SOURCE_DIR;
    std::vector<std::string> violations;
    std::size_t files = 0;
    for (const std::string top : {"core", "cuda", "ui", "app", "tests"}) {
        for (const auto& entry : fs::recursive_directory_iterator(root + "/" + top)) {
            const std::string extension = entry.path().extension().string();
            if (!entry.is_regular_file()
                || (extension != ".h" && extension != ".cpp" && extension != ".cu" && extension != ".cuh")) {
                continue;
            }
            ++files;
            std::ifstream in(entry.path());
            const std::string source((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            std::vector<std::string> lines;
            std::stringstream split(source);
            for (std::string text; std::getline(split, text);) {
                lines.push_back(text);
            }
            for (const FunctionSpan& span : functionSpans(source)) {
                if (span.lines <= kMostLines) {
                    continue;
                }
                bool said = false;
                for (int l = span.firstLine - 2; l >= 0 && l < static_cast<int>(lines.size()); --l) {
                    const std::string& text = lines[static_cast<std::size_t>(l)];
                    const auto first = text.find_first_not_of(" \t");
                    if (first == std::string::npos || text.compare(first, 2, "//") != 0) {
                        break;
                    }
                    said = said || text.find("Long: ") != std::string::npos;
                }
                if (!said) {
                    violations.push_back(fs::relative(entry.path(), root).string() + ":"
                        + std::to_string(span.firstLine) + ": " + std::to_string(span.lines) + " lines");
                }
            }
        }
    }
    QVERIFY(files > 300); // the walk found the sources
    std::string list;
    for (const std::string& violation : violations) {
        list += violation + "\n";
    }
    QVERIFY2(violations.empty(),
        ("functions over " + std::to_string(kMostLines) + " lines without a \"Long: \" comment saying why:\n" + list)
            .c_str());
}

MISMATCH_TEST_GUILESS_MAIN(TestCommon)
#include "test_common.moc"
