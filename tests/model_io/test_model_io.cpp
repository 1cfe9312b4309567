// Model I/O: safetensors round trips and every malformed-file case, sharded checkpoints, config.json parsing
// (round trips, real published configs, error cases), checkpoint-vs-config validation and `mismatch model info`.
#include "app/cli/cli.h"
#include "core/common/error.h"
#include "core/model/config.h"
#include "core/model/model_files.h"
#include "core/model/safetensors.h"
#include "tests/common/test_main.h"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QtTest>

#include <algorithm>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>

using namespace mismatch;
using namespace mismatch::model;

namespace {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

void writeText(const std::string& path, const std::string& text)
{
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

// A safetensors file by hand: 8-byte little-endian header length (the real one unless `declaredLength` is
// given), the header text, then `dataBytes` bytes of data.
QByteArray craft(const QByteArray& header, int dataBytes, qint64 declaredLength = -1)
{
    const quint64 length = declaredLength >= 0 ? quint64(declaredLength) : quint64(header.size());
    QByteArray bytes;
    for (int i = 0; i < 8; ++i) {
        bytes.append(char((length >> (8 * i)) & 0xff));
    }
    bytes.append(header);
    for (int i = 0; i < dataBytes; ++i) {
        bytes.append(char(i * 37 + 11));
    }
    return bytes;
}

// Runs `action`, expects an InputError whose message names `file` and contains every `expected` piece.
void expectInputError(const std::function<void()>& action, const std::string& file,
    const std::vector<std::string>& expected, const std::string& location = {})
{
    try {
        action();
    } catch (const InputError& error) {
        const std::string message = error.what();
        QVERIFY2(message.find(file) != std::string::npos, ("message does not name " + file + ": " + message).c_str());
        for (const std::string& piece : expected) {
            QVERIFY2(message.find(piece) != std::string::npos, ("message lacks '" + piece + "': " + message).c_str());
        }
        if (!location.empty()) {
            QCOMPARE(error.location(), location);
        }
        return;
    } catch (const std::exception& error) {
        QFAIL((std::string("expected InputError, got: ") + error.what()).c_str());
    }
    QFAIL("expected InputError, nothing was thrown");
}

at::ScalarType scalarTypeOf(DType dtype)
{
    return dtype == DType::F32 ? at::kFloat : dtype == DType::F16 ? at::kHalf : at::kBFloat16;
}

// Same bits, not merely equal values (random bit patterns include NaNs, where == would fail).
bool bitEqual(const at::Tensor& a, const at::Tensor& b)
{
    if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
        return false;
    }
    const at::ScalarType bits = a.element_size() == 4 ? at::kInt : at::kShort;
    return at::equal(a.contiguous().view(bits), b.contiguous().view(bits));
}

// Every bit pattern is possible: NaNs, infinities, subnormals, negative zero.
at::Tensor randomBits(const std::vector<std::int64_t>& shape, at::ScalarType type)
{
    if (type == at::kFloat) {
        return at::randint(std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max(), shape,
            at::TensorOptions().dtype(at::kInt))
            .view(at::kFloat);
    }
    return at::randint(std::numeric_limits<std::int16_t>::min(), std::numeric_limits<std::int16_t>::max(), shape,
        at::TensorOptions().dtype(at::kShort))
        .view(type);
}

std::uint64_t freshSeed()
{
    const std::uint64_t seed = QRandomGenerator::global()->generate64();
    at::manual_seed(seed);
    return seed;
}

// The tiny configurations the tests build models from; outputBias and qkNorm set as parseConfig derives them.
ModelConfig tinyConfig(const QString& kind)
{
    ModelConfig c;
    c.vocabSize = 64;
    c.hiddenSize = 32;
    c.intermediateSize = 48;
    c.numLayers = 2;
    c.numHeads = 4;
    c.numKeyValueHeads = 2;
    c.headDim = 8;
    c.rmsNormEps = 1e-5;
    c.ropeTheta = 500000.0;
    c.maxPositionEmbeddings = 256;
    if (kind == "llama" || kind == "llama-bias") {
        c.architecture = Architecture::Llama;
        c.ropeScaling = {"llama3", 8.0, 1.0, 4.0, 128};
        c.bosTokenId = 0;
        c.eosTokenIds = {1, 2};
        c.torchDtype = "bfloat16";
        c.attentionBias = c.outputBias = (kind == "llama-bias");
    } else if (kind == "qwen2") {
        c.architecture = Architecture::Qwen2;
        c.intermediateSize = 64;
        c.rmsNormEps = 1e-6;
        c.ropeTheta = 1000000.0;
        c.tieWordEmbeddings = true;
        c.attentionBias = true;
        c.eosTokenIds = {3};
        c.torchDtype = "bfloat16";
    } else if (kind == "qwen3") {
        c.architecture = Architecture::Qwen3;
        c.headDim = 16; // deliberately not hidden / heads
        c.qkNorm = true;
        c.bosTokenId = 5;
        c.eosTokenIds = {6};
        c.torchDtype = "float32";
    }
    return c;
}

// The tensors of a model, written out by hand from the Hugging Face module layout (independent of
// expectedTensors(), which the validation tests check against this list).
NamedTensors tinyModelTensors(const ModelConfig& c)
{
    const at::ScalarType type
        = c.torchDtype == "bfloat16" ? at::kBFloat16 : (c.torchDtype == "float16" ? at::kHalf : at::kFloat);
    const auto make = [&](std::vector<std::int64_t> shape) { return at::randn(shape).to(type); };
    const std::int64_t h = c.hiddenSize;
    const std::int64_t q = c.numHeads * c.headDim;
    const std::int64_t kv = c.numKeyValueHeads * c.headDim;
    NamedTensors t;
    t.emplace_back("model.embed_tokens.weight", make({c.vocabSize, h}));
    for (int i = 0; i < c.numLayers; ++i) {
        const std::string p = "model.layers." + std::to_string(i) + ".";
        t.emplace_back(p + "self_attn.q_proj.weight", make({q, h}));
        t.emplace_back(p + "self_attn.k_proj.weight", make({kv, h}));
        t.emplace_back(p + "self_attn.v_proj.weight", make({kv, h}));
        t.emplace_back(p + "self_attn.o_proj.weight", make({h, q}));
        if (c.architecture == Architecture::Qwen2 || c.attentionBias) {
            t.emplace_back(p + "self_attn.q_proj.bias", make({q}));
            t.emplace_back(p + "self_attn.k_proj.bias", make({kv}));
            t.emplace_back(p + "self_attn.v_proj.bias", make({kv}));
        }
        if (c.architecture != Architecture::Qwen2 && c.attentionBias) {
            t.emplace_back(p + "self_attn.o_proj.bias", make({h}));
        }
        if (c.architecture == Architecture::Qwen3) {
            t.emplace_back(p + "self_attn.q_norm.weight", make({c.headDim}));
            t.emplace_back(p + "self_attn.k_norm.weight", make({c.headDim}));
        }
        t.emplace_back(p + "mlp.gate_proj.weight", make({c.intermediateSize, h}));
        t.emplace_back(p + "mlp.up_proj.weight", make({c.intermediateSize, h}));
        t.emplace_back(p + "mlp.down_proj.weight", make({h, c.intermediateSize}));
        t.emplace_back(p + "input_layernorm.weight", make({h}));
        t.emplace_back(p + "post_attention_layernorm.weight", make({h}));
    }
    t.emplace_back("model.norm.weight", make({h}));
    if (!c.tieWordEmbeddings) {
        t.emplace_back("lm_head.weight", make({c.vocabSize, h}));
    }
    return t;
}

std::int64_t elementCount(const NamedTensors& tensors)
{
    std::int64_t total = 0;
    for (const auto& entry : tensors) {
        total += entry.second.numel();
    }
    return total;
}

void writeModelDirectory(
    const std::string& directory, const ModelConfig& config, const NamedTensors& tensors, bool sharded)
{
    QVERIFY(QDir().mkpath(QString::fromStdString(directory)));
    writeText(directory + "/config.json", configToJson(config));
    if (sharded) {
        writeShardedSafetensors(directory, tensors, 8 * 1024);
    } else {
        writeSafetensors(directory + "/model.safetensors", tensors, {{"format", "pt"}});
    }
}

// A minimal valid Qwen2 config.json that the error cases patch.
nlohmann::json baseConfigJson()
{
    return nlohmann::json::parse(R"({
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "vocab_size": 64, "hidden_size": 32,
        "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "rope_scaling": null, "tie_word_embeddings": true,
        "bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 512, "torch_dtype": "bfloat16"})");
}

} // namespace

class TestModelIo : public QObject {
    Q_OBJECT

private:
    QTemporaryDir scratch_;
    std::string path(const std::string& name) const
    {
        return scratch_.filePath(QString::fromStdString(name)).toStdString();
    }

private slots:
    void initTestCase()
    {
        QVERIFY(scratch_.isValid());
        qInfo("random seed for this run: %llu", static_cast<unsigned long long>(freshSeed()));
    }

    void roundTrip_data()
    {
        QTest::addColumn<int>("dtype");
        QTest::newRow("F32") << int(DType::F32);
        QTest::newRow("F16") << int(DType::F16);
        QTest::newRow("BF16") << int(DType::BF16);
    }

    void roundTrip()
    {
        QFETCH(int, dtype);
        const DType stored = DType(dtype);
        const at::ScalarType type = scalarTypeOf(stored);
        NamedTensors tensors = {
            {"values", at::randn({7, 5}).to(type)},
            {"bits", randomBits({3, 4, 5}, type)},
            {"scalar", at::randn({1}).squeeze().to(type)},
            {"empty", at::empty({0, 3}, at::TensorOptions().dtype(type))},
            // A non-contiguous view: the writer must store its logical order.
            {"transposed", at::randn({4, 6}).to(type).t()},
        };
        const std::string file = path("round_trip_" + toString(stored) + ".safetensors");
        const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "round trip"}};
        writeSafetensors(file, tensors, metadata);
        QVERIFY(!QFile::exists(QString::fromStdString(file + ".tmp")));

        auto reader = SafetensorsFile::open(file);
        QCOMPARE(reader->tensors().size(), tensors.size());
        QVERIFY(reader->metadata() == metadata);
        for (const auto& [name, tensor] : tensors) {
            QVERIFY2(reader->contains(name), name.c_str());
            QVERIFY(reader->info(name).dtype == stored);
            QCOMPARE(reader->info(name).shape, tensor.sizes().vec());
            const at::Tensor loaded = reader->load(name);
            QCOMPARE(loaded.scalar_type(), type);
            QVERIFY2(bitEqual(loaded, tensor), ("bits differ for " + name).c_str());
        }
        // Stored in the order given: the data section follows the argument order.
        QCOMPARE(reader->info("values").begin, std::uint64_t(0));
        QVERIFY(reader->info("bits").begin == reader->info("values").end);
        // The loaded tensor owns its bytes: it outlives the mapping.
        const at::Tensor kept = reader->load("values");
        const std::weak_ptr<SafetensorsFile> weak = reader;
        reader.reset();
        QVERIFY(weak.expired());
        QVERIFY(bitEqual(kept, tensors[0].second));
    }

    // A file cut short after it was opened (validated against its size then): load() reads through the file
    // descriptor and says so, naming the file and the tensor, instead of faulting on the mapping.
    void fileCutShortAfterOpen()
    {
        const std::string file = path("cut_short.safetensors");
        const at::Tensor first = at::randn({64, 64});
        writeSafetensors(file, {{"first", first}, {"second", at::randn({64, 64})}});
        const auto reader = SafetensorsFile::open(file);
        QFile handle(QString::fromStdString(file));
        QVERIFY(handle.resize(handle.size() - 100));
        QVERIFY(bitEqual(reader->load("first"), first));
        expectInputError([&] { reader->load("second"); }, file,
            {"cannot read tensor second", "before the tensor's last byte", "cut short after it was opened"},
            "second");
    }

    void writerRefusesOtherDtypes()
    {
        const std::string file = path("int.safetensors");
        QVERIFY_THROWS_EXCEPTION(Error, writeSafetensors(file, {{"w", at::ones({2}, at::kInt)}}));
        QVERIFY_THROWS_EXCEPTION(Error, writeSafetensors(file, {{"w", at::ones({2})}, {"w", at::ones({2})}}));
        QVERIFY(!QFile::exists(QString::fromStdString(file)));

        // A failed write leaves an existing file as it was, and no temporary behind.
        const at::Tensor original = at::randn({3});
        writeSafetensors(file, {{"w", original}});
        QVERIFY_THROWS_EXCEPTION(
            Error, writeSafetensors(file, {{"w", at::randn({5})}, {"x", at::ones({2}, at::kLong)}}));
        QVERIFY(bitEqual(SafetensorsFile::open(file)->load("w"), original));
        QVERIFY(!QFile::exists(QString::fromStdString(file + ".tmp")));
        expectInputError([&] { SafetensorsFile::open(scratch_.path().toStdString()); }, scratch_.path().toStdString(),
            {"not a regular file"});
    }

    void shardedRoundTrip()
    {
        NamedTensors tensors;
        for (int i = 0; i < 6; ++i) {
            tensors.emplace_back("t" + std::to_string(i), randomBits({16, 32}, i % 2 ? at::kBFloat16 : at::kFloat));
        }
        const std::string directory = path("sharded");
        // 16*32*4 = 2048 bytes for F32 tensors, 1024 for BF16: at most 3072 bytes gives 3 shards of two.
        writeShardedSafetensors(directory, tensors, 3072);
        for (int i = 1; i <= 3; ++i) {
            const QString shard = QString::fromStdString(directory)
                + QString("/model-%1-of-00003.safetensors").arg(i, 5, 10, QChar('0'));
            QVERIFY2(QFile::exists(shard), qPrintable(shard));
        }
        std::ifstream indexIn(directory + "/model.safetensors.index.json");
        const nlohmann::json index = nlohmann::json::parse(indexIn);
        QCOMPARE(index["metadata"]["total_size"].get<std::uint64_t>(), std::uint64_t(3 * 2048 + 3 * 1024));
        QCOMPARE(index["weight_map"]["t0"].get<std::string>(), std::string("model-00001-of-00003.safetensors"));
        QCOMPARE(index["weight_map"]["t5"].get<std::string>(), std::string("model-00003-of-00003.safetensors"));

        const Checkpoint checkpoint = Checkpoint::open(directory);
        QCOMPARE(checkpoint.names().size(), tensors.size());
        QCOMPARE(checkpoint.files().size(), std::size_t(3));
        for (const auto& [name, tensor] : tensors) {
            QVERIFY2(bitEqual(checkpoint.load(name), tensor), name.c_str());
        }
    }

    void malformedFile_data()
    {
        QTest::addColumn<QByteArray>("bytes");
        QTest::addColumn<QString>("expected");

        const QByteArray f32w = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
        QTest::newRow("shorter than length")
            << QByteArray("\x05\x00\x00", 3) << "too short for the 8-byte header length";
        QTest::newRow("length past end") << craft(f32w, 16, 5000) << "header length 5000 runs past the end of the file";
        QTest::newRow("invalid JSON") << craft(R"({"w": {"dtype": "F32",)", 0) << "invalid JSON header";
        QTest::newRow("header not object") << craft("[1, 2]", 0) << "expected a JSON object, got array";
        QTest::newRow("I8") << craft(R"({"w":{"dtype":"I8","shape":[4],"data_offsets":[0,4]}})", 4)
                            << "unsupported dtype I8 for tensor w (supported: F32, F16, BF16)";
        QTest::newRow("F64") << craft(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", 16)
                             << "unsupported dtype F64 for tensor w (supported: F32, F16, BF16)";
        QTest::newRow("U8") << craft(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 4)
                            << "unsupported dtype U8 for tensor w (supported: F32, F16, BF16)";
        QTest::newRow("unknown dtype") << craft(R"({"w":{"dtype":"Q7","shape":[4],"data_offsets":[0,4]}})", 4)
                                       << "unsupported dtype Q7 for tensor w";
        QTest::newRow("missing dtype") << craft(R"({"w":{"shape":[4],"data_offsets":[0,16]}})", 16)
                                       << "missing string key dtype for tensor w";
        QTest::newRow("offsets past end")
            << craft(f32w, 8) << "data_offsets [0, 16] of tensor w run past the end of the data section (8 bytes)";
        QTest::newRow("overlap") << craft(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                          R"("b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
            24) << "tensor b at [8, 24) overlaps tensor a at [0, 16)";
        QTest::newRow("gap") << craft(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                      R"("b":{"dtype":"F32","shape":[4],"data_offsets":[24,40]}})",
            40) << "data section not covered: bytes [16, 24) before tensor b belong to no tensor";
        QTest::newRow("trailing bytes") << craft(
            f32w, 20) << "data section not covered: the tensors end at byte 16 but the data section holds 20 bytes";
        QTest::newRow("size mismatch")
            << craft(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,16]}})", 16)
            << "size mismatch for tensor w: data_offsets [0, 16] hold 16 bytes but shape [2, 3] of F32 needs 24 bytes";
        QTest::newRow("bf16 size mismatch") << craft(R"({"w":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})", 16)
                                            << "shape [4] of BF16 needs 8 bytes";
        QTest::newRow("negative dim") << craft(R"({"w":{"dtype":"F32","shape":[-4],"data_offsets":[0,16]}})", 16)
                                      << "shape of tensor w must hold non-negative integers";
        QTest::newRow("offsets reversed") << craft(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[16,0]}})", 16)
                                          << "data_offsets of tensor w end before they begin: [16, 0]";
        QTest::newRow("offsets not pair") << craft(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0]}})", 16)
                                          << "data_offsets of tensor w must be [begin, end]";
        // Issue 46: nlohmann keeps the last of two equal keys, so the first entry (here overlapping tensor b, or
        // without a shape) vanished and the file was accepted.
        QTest::newRow("tensor twice") << craft(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[8,24]},)"
                                               R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]},)"
                                               R"("a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
            24) << "header: key 'a' appears twice (a tensor listed twice)";
        QTest::newRow("tensor twice, first without shape")
            << craft(R"({"w":{"dtype":"F32","data_offsets":[0,16]},"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
                   16)
            << "key 'w' appears twice";
        QTest::newRow("key twice in an entry")
            << craft(R"({"w":{"dtype":"F32","shape":[2],"shape":[4],"data_offsets":[0,16]}})", 16)
            << "header.w: key 'shape' appears twice";
        {
            // Issue 46: a file of 200,000 tiny tensors kept `mismatch quantize` busy for 37 s; the limit is
            // 100,000 tensors per file (zero-size tensors here: the header alone is over it).
            QByteArray many = "{";
            for (int i = 0; i <= 100000; ++i) {
                many += (i ? "," : "") + QByteArray("\"t") + QByteArray::number(i)
                    + "\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}";
            }
            QTest::newRow("over 100,000 tensors") << craft(many + "}", 0)
                                                  << "lists 100001 entries, over the limit of 100000 tensors";
        }
        QTest::newRow("metadata not string")
            << craft(R"({"__metadata__":{"format":1}})", 0) << "metadata values must be strings, got number";
    }

    void malformedFile()
    {
        QFETCH(QByteArray, bytes);
        QFETCH(QString, expected);
        const std::string file = path(std::string("malformed_") + QTest::currentDataTag() + ".safetensors");
        {
            QFile out(QString::fromStdString(file));
            QVERIFY(out.open(QIODevice::WriteOnly));
            QCOMPARE(out.write(bytes), qint64(bytes.size()));
        }
        expectInputError([&] { SafetensorsFile::open(file); }, file, {expected.toStdString()});
    }

    void validHandCraftedFile()
    {
        // The same crafting helper yields a file the reader accepts: the malformed cases fail for their reason.
        QByteArray bytes
            = craft(R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},)"
                    R"("b":{"dtype":"F32","shape":[],"data_offsets":[4,8]}})",
                0);
        // a = [1.0, -2.0] in IEEE half (0x3c00, 0xc000), b = 0.5f (0x3f000000), little-endian.
        bytes.append(QByteArray("\x00\x3c\x00\xc0\x00\x00\x00\x3f", 8));
        const std::string file = path("hand.safetensors");
        QFile out(QString::fromStdString(file));
        QVERIFY(out.open(QIODevice::WriteOnly));
        out.write(bytes);
        out.close();
        const auto reader = SafetensorsFile::open(file);
        QCOMPARE(reader->metadata().at("format"), std::string("pt"));
        const at::Tensor a = reader->load("a").to(at::kFloat);
        QCOMPARE(a[0].item<float>(), 1.0f);
        QCOMPARE(a[1].item<float>(), -2.0f);
        QCOMPARE(reader->load("b").item<float>(), 0.5f);
        expectInputError([&] { reader->info("c"); }, file, {"no tensor named c"});
    }

    void shardedErrors_data()
    {
        QTest::addColumn<QString>("mutation");
        QTest::addColumn<QString>("expected");
        QTest::newRow("listed but absent")
            << "listed"
            << "tensor extra is listed in shard model-00001-of-00002.safetensors but that shard does not contain it";
        QTest::newRow("two shards") << "duplicate"
                                    << "tensor b is present in two shards";
        QTest::newRow("missing shard") << "missing"
                                       << "shard model-00009-of-00009.safetensors of tensor extra does not exist";
        QTest::newRow("unlisted")
            << "unlisted"
            << "tensor b is stored in shard model-00001-of-00002.safetensors but not listed in weight_map";
        QTest::newRow("invalid index") << "invalid"
                                       << "invalid JSON";
        QTest::newRow("no weight_map") << "no-map"
                                       << "expected an object mapping tensor names to shard files";
    }

    void shardedErrors()
    {
        QFETCH(QString, mutation);
        QFETCH(QString, expected);
        const std::string directory = path("sharded_" + mutation.toStdString());
        const NamedTensors tensors = {{"a", at::randn({8})}, {"b", at::randn({8})}, {"c", at::randn({8})}};
        writeShardedSafetensors(directory, tensors, 64); // 32 bytes each: {a, b} and {c}
        const std::string indexPath = directory + "/model.safetensors.index.json";
        const std::string shard1 = "model-00001-of-00002.safetensors";
        const std::string shard2 = "model-00002-of-00002.safetensors";
        nlohmann::json index = nlohmann::json::parse(std::ifstream(indexPath));
        QCOMPARE(index["weight_map"]["b"].get<std::string>(), shard1);
        QCOMPARE(index["weight_map"]["c"].get<std::string>(), shard2);
        Checkpoint::open(directory); // valid before the mutation

        if (mutation == "listed") {
            index["weight_map"]["extra"] = shard1;
        } else if (mutation == "duplicate") {
            // Shard 2 also stores b; the index still points b at shard 1.
            writeSafetensors(directory + "/" + shard2, {{"b", at::randn({8})}, {"c", tensors[2].second}});
        } else if (mutation == "missing") {
            index["weight_map"]["extra"] = "model-00009-of-00009.safetensors";
        } else if (mutation == "unlisted") {
            index["weight_map"].erase("b");
        } else if (mutation == "no-map") {
            index.erase("weight_map");
        }
        writeText(indexPath, mutation == "invalid" ? std::string("{\"weight_map\": {") : index.dump());
        expectInputError([&] { Checkpoint::open(directory); }, indexPath, {expected.toStdString()});
    }

    void missingCheckpoint()
    {
        const std::string directory = path("empty_model");
        QVERIFY(QDir().mkpath(QString::fromStdString(directory)));
        expectInputError([&] { Checkpoint::open(directory); }, directory,
            {"expected model.safetensors or model.safetensors.index.json"});
        expectInputError([&] { openModelDirectory(directory); }, directory + "/config.json", {"cannot open"});
    }

    void configRoundTrip_data()
    {
        QTest::addColumn<QString>("kind");
        for (const char* kind : {"llama", "llama-bias", "qwen2", "qwen3"}) {
            QTest::newRow(kind) << QString(kind);
        }
    }

    void configRoundTrip()
    {
        QFETCH(QString, kind);
        const ModelConfig config = tinyConfig(kind);
        const std::string text = configToJson(config);
        const ModelConfig back = parseConfig(text, "config.json");
        QVERIFY2(back == config, text.c_str());
        QCOMPARE(configToJson(back), text);
        // The written file is what Transformers reads: spot-check the keys it uses.
        const nlohmann::json j = nlohmann::json::parse(text);
        QCOMPARE(j["architectures"][0].get<std::string>(), toString(config.architecture));
        QCOMPARE(j["num_key_value_heads"].get<std::int64_t>(), config.numKeyValueHeads);
        if (kind == "llama") {
            QCOMPARE(j["rope_scaling"]["rope_type"].get<std::string>(), std::string("llama3"));
            QCOMPARE(j["eos_token_id"], nlohmann::json({1, 2}));
        }
    }

    void realConfigs_data()
    {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("architecture");
        QTest::addColumn<qint64>("headDim");
        QTest::addColumn<bool>("attentionBias");
        QTest::addColumn<qint64>("parameters"); // as published on the model cards
        // Trimmed from the published config.json files (irrelevant keys dropped).
        QTest::newRow("Llama-3.2-1B") << R"({"architectures":["LlamaForCausalLM"],"attention_bias":false,
            "bos_token_id":128000,"eos_token_id":128001,"head_dim":64,"hidden_act":"silu","hidden_size":2048,
            "intermediate_size":8192,"max_position_embeddings":131072,"mlp_bias":false,"model_type":"llama",
            "num_attention_heads":32,"num_hidden_layers":16,"num_key_value_heads":8,"rms_norm_eps":1e-05,
            "rope_scaling":{"factor":32.0,"high_freq_factor":4.0,"low_freq_factor":1.0,
            "original_max_position_embeddings":8192,"rope_type":"llama3"},"rope_theta":500000.0,
            "tie_word_embeddings":true,"torch_dtype":"bfloat16","vocab_size":128256})"
                                      << "LlamaForCausalLM" << qint64(64) << false << qint64(1235814400);
        QTest::newRow("Qwen2.5-0.5B") << R"({"architectures":["Qwen2ForCausalLM"],"attention_dropout":0.0,
            "bos_token_id":151643,"eos_token_id":151643,"hidden_act":"silu","hidden_size":896,
            "intermediate_size":4864,"max_position_embeddings":32768,"max_window_layers":24,"model_type":"qwen2",
            "num_attention_heads":14,"num_hidden_layers":24,"num_key_value_heads":2,"rms_norm_eps":1e-06,
            "rope_theta":1000000.0,"sliding_window":32768,"tie_word_embeddings":true,"torch_dtype":"bfloat16",
            "use_cache":true,"use_sliding_window":false,"vocab_size":151936})"
                                      << "Qwen2ForCausalLM" << qint64(64) << true << qint64(494032768);
        QTest::newRow("Qwen3-0.6B") << R"({"architectures":["Qwen3ForCausalLM"],"attention_bias":false,
            "bos_token_id":151643,"eos_token_id":151645,"head_dim":128,"hidden_act":"silu","hidden_size":1024,
            "intermediate_size":3072,"max_position_embeddings":40960,"max_window_layers":28,"model_type":"qwen3",
            "num_attention_heads":16,"num_hidden_layers":28,"num_key_value_heads":8,"rms_norm_eps":1e-06,
            "rope_scaling":null,"rope_theta":1000000,"sliding_window":null,"tie_word_embeddings":true,
            "torch_dtype":"bfloat16","use_sliding_window":false,"vocab_size":151936})"
                                    << "Qwen3ForCausalLM" << qint64(128) << false << qint64(596049920);
    }

    void realConfigs()
    {
        QFETCH(QString, text);
        QFETCH(QString, architecture);
        QFETCH(qint64, headDim);
        QFETCH(bool, attentionBias);
        QFETCH(qint64, parameters);
        const ModelConfig config = parseConfig(text.toStdString(), "config.json");
        QCOMPARE(QString::fromStdString(toString(config.architecture)), architecture);
        QCOMPARE(config.headDim, std::int64_t(headDim));
        QCOMPARE(config.attentionBias, attentionBias);
        QCOMPARE(config.parameterCount(), std::int64_t(parameters));
        QCOMPARE(config.torchDtype, std::string("bfloat16"));
        QVERIFY(config.tieWordEmbeddings);
        QVERIFY(config.numHeads % config.numKeyValueHeads == 0);
        if (config.architecture == Architecture::Llama) {
            QCOMPARE(config.ropeScaling.type, std::string("llama3"));
            QCOMPARE(config.ropeScaling.factor, 32.0);
            QCOMPARE(config.ropeScaling.originalMaxPositionEmbeddings, std::int64_t(8192));
            QCOMPARE(config.rmsNormEps, 1e-5);
        } else {
            QCOMPARE(config.ropeScaling.type, std::string("none"));
            QCOMPARE(config.ropeTheta, 1000000.0);
        }
        QCOMPARE(config.qkNorm, config.architecture == Architecture::Qwen3);
    }

    void configDefaults()
    {
        nlohmann::json j = baseConfigJson();
        j.erase("num_key_value_heads");
        j["eos_token_id"] = {2, 7};
        j["rope_scaling"] = {{"type", "llama3"}, {"factor", 8}, {"low_freq_factor", 1}, {"high_freq_factor", 4},
            {"original_max_position_embeddings", 64}};
        const ModelConfig config = parseConfig(j.dump(), "config.json");
        QCOMPARE(config.numKeyValueHeads, config.numHeads);
        QCOMPARE(config.headDim, std::int64_t(8)); // 32 / 4
        QVERIFY(config.attentionBias); // Qwen2 default
        QVERIFY(!config.outputBias);
        QCOMPARE(config.eosTokenIds, (std::vector<std::int64_t> {2, 7}));
        QCOMPARE(config.ropeScaling.type, std::string("llama3")); // legacy `type` key
        QCOMPARE(config.ropeScaling.factor, 8.0);
    }

    void configErrors_data()
    {
        QTest::addColumn<QString>("patch"); // JSON merge patch on baseConfigJson(); null removes a key
        QTest::addColumn<QString>("location");
        QTest::addColumn<QString>("expected");
        QTest::newRow("unknown architecture") << R"({"architectures":["MistralForCausalLM"]})"
                                              << "architectures"
                                              << "unsupported architecture 'MistralForCausalLM' (supported: "
                                                 "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)";
        QTest::newRow("missing hidden_size") << R"({"hidden_size":null})"
                                             << "hidden_size"
                                             << "missing required key";
        QTest::newRow("hidden_size string") << R"({"hidden_size":"32"})"
                                            << "hidden_size"
                                            << "expected an integer, got string";
        QTest::newRow("layers float") << R"({"num_hidden_layers":2.5})"
                                      << "num_hidden_layers"
                                      << "expected an integer, got number";
        QTest::newRow("negative layers") << R"({"num_hidden_layers":-2})"
                                         << "num_hidden_layers"
                                         << "must be positive, got -2";
        QTest::newRow("zero vocab") << R"({"vocab_size":0})"
                                    << "vocab_size"
                                    << "must be positive, got 0";
        QTest::newRow("heads not multiple") << R"({"num_key_value_heads":3})"
                                            << "num_key_value_heads"
                                            << "num_attention_heads (4) is not a multiple of num_key_value_heads (3)";
        QTest::newRow("hidden not multiple") << R"({"num_attention_heads":6,"num_key_value_heads":2})"
                                             << "num_attention_heads"
                                             << "hidden_size (32) is not a multiple of num_attention_heads (6)";
        QTest::newRow("odd head_dim") << R"({"head_dim":7})"
                                      << "head_dim"
                                      << "must be even";
        QTest::newRow("qwen3 without head_dim") << R"({"architectures":["Qwen3ForCausalLM"]})"
                                                << "head_dim"
                                                << "Qwen3ForCausalLM configs state head_dim explicitly";
        QTest::newRow("yarn") << R"({"rope_scaling":{"rope_type":"yarn","factor":4.0}})"
                              << "rope_scaling.rope_type"
                              << "unsupported rope scaling type 'yarn' (supported: null, default, llama3)";
        QTest::newRow("llama3 without factor")
            << R"({"rope_scaling":{"rope_type":"llama3","low_freq_factor":1,"high_freq_factor":4,"original_max_position_embeddings":64}})"
            << "rope_scaling.factor"
            << "missing required key";
        QTest::newRow("rope_scaling list") << R"({"rope_scaling":[1]})"
                                           << "rope_scaling"
                                           << "expected null or an object";
        QTest::newRow("eos string") << R"({"eos_token_id":"</s>"})"
                                    << "eos_token_id"
                                    << "expected an integer or a list of integers";
        QTest::newRow("eos list of strings") << R"({"eos_token_id":[1,"x"]})"
                                             << "eos_token_id[1]"
                                             << "expected an integer, got string";
        QTest::newRow("tie not bool") << R"({"tie_word_embeddings":1})"
                                      << "tie_word_embeddings"
                                      << "expected true or false";
        QTest::newRow("eps zero") << R"({"rms_norm_eps":0})"
                                  << "rms_norm_eps"
                                  << "must be positive";
        QTest::newRow("dtype") << R"({"torch_dtype":"float8_e4m3fn"})"
                               << "torch_dtype"
                               << "unsupported dtype 'float8_e4m3fn'";
        QTest::newRow("sliding window") << R"({"use_sliding_window":true})"
                                        << "use_sliding_window"
                                        << "not supported";
        QTest::newRow("activation") << R"({"hidden_act":"gelu"})"
                                    << "hidden_act"
                                    << "unsupported activation 'gelu'";
        QTest::newRow("no architecture") << R"({"architectures":null,"model_type":null})"
                                         << "architectures"
                                         << "missing (supported: LlamaForCausalLM";
    }

    void configErrors()
    {
        QFETCH(QString, patch);
        QFETCH(QString, location);
        QFETCH(QString, expected);
        nlohmann::json j = baseConfigJson();
        j.merge_patch(nlohmann::json::parse(patch.toStdString()));
        const std::string file = "/models/tiny/config.json";
        expectInputError([&] { parseConfig(j.dump(), file); }, file, {expected.toStdString()}, location.toStdString());
    }

    void configNotJson()
    {
        expectInputError([] { parseConfig("{\"hidden_size\": ", "bad.json"); }, "bad.json", {"invalid JSON"});
        expectInputError([] { parseConfig("[1]", "list.json"); }, "list.json", {"expected a JSON object, got array"});
    }

    void checkpointValid_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<bool>("sharded");
        for (const char* kind : {"llama", "llama-bias", "qwen2", "qwen3"}) {
            QTest::newRow(kind) << QString(kind) << false;
        }
        QTest::newRow("qwen2 sharded") << QString("qwen2") << true;
    }

    void checkpointValid()
    {
        QFETCH(QString, kind);
        QFETCH(bool, sharded);
        const ModelConfig config = tinyConfig(kind);
        const NamedTensors tensors = tinyModelTensors(config);
        const std::string directory = path("valid_" + std::string(QTest::currentDataTag()));
        writeModelDirectory(directory, config, tensors, sharded);
        const ModelFiles files = openModelDirectory(directory);
        QVERIFY(files.config == config);
        // The configuration's parameter formula agrees with the tensors actually stored.
        const CheckpointStats stats = checkpointStats(files.checkpoint);
        QCOMPARE(stats.parameterCount, elementCount(tensors));
        QCOMPARE(config.parameterCount(), elementCount(tensors));
        QCOMPARE(stats.tensorCount, std::int64_t(tensors.size()));
        QCOMPARE(expectedTensors(config).size(), tensors.size());
        QCOMPARE(stats.bytes, std::uint64_t(elementCount(tensors)) * byteSize(dtypeFromTorchDtype(config.torchDtype)));
        QVERIFY(sharded ? stats.files.size() > 1 : stats.files.size() == 1);
    }

    void checkpointTolerated()
    {
        // A tied model that still stores lm_head.weight as a copy of the embedding, plus an old rotary buffer:
        // both accepted.
        const ModelConfig config = tinyConfig("qwen2");
        NamedTensors tensors = tinyModelTensors(config);
        at::Tensor embedding;
        for (const auto& [name, tensor] : tensors) {
            if (name == "model.embed_tokens.weight") {
                embedding = tensor;
            }
        }
        QVERIFY(embedding.defined());
        tensors.emplace_back("lm_head.weight", embedding.clone());
        tensors.emplace_back("model.layers.0.self_attn.rotary_emb.inv_freq", at::randn({4}).to(at::kBFloat16));
        const std::string directory = path("tolerated");
        writeModelDirectory(directory, config, tensors, false);
        openModelDirectory(directory);

        // A different lm_head beside tied embeddings would be silently ignored: refused, naming the tensor.
        tensors[tensors.size() - 2].second = (embedding.to(at::kFloat) * 2).to(embedding.scalar_type());
        const std::string differing = path("tied-but-different");
        writeModelDirectory(differing, config, tensors, false);
        expectInputError([&] { openModelDirectory(differing); }, differing, {"lm_head.weight", "tie_word_embeddings"});
    }

    void checkpointErrors_data()
    {
        QTest::addColumn<QString>("kind");
        QTest::addColumn<QString>("action"); // remove | add | transpose | f32
        QTest::addColumn<QString>("tensor");
        QTest::addColumn<QString>("expected");
        QTest::newRow("qwen2 missing q bias")
            << "qwen2"
            << "remove"
            << "model.layers.1.self_attn.q_proj.bias"
            << "missing tensor model.layers.1.self_attn.q_proj.bias (expected shape [32], BF16)";
        QTest::newRow("qwen2 missing k bias") << "qwen2"
                                              << "remove"
                                              << "model.layers.0.self_attn.k_proj.bias"
                                              << "(expected shape [16], BF16)";
        QTest::newRow("qwen3 missing k_norm")
            << "qwen3"
            << "remove"
            << "model.layers.0.self_attn.k_norm.weight"
            << "missing tensor model.layers.0.self_attn.k_norm.weight (expected shape [16], F32)";
        QTest::newRow("qwen3 missing q_proj") << "qwen3"
                                              << "remove"
                                              << "model.layers.1.self_attn.q_proj.weight"
                                              << "(expected shape [64, 32], F32)";
        QTest::newRow("llama missing lm_head") << "llama"
                                               << "remove"
                                               << "lm_head.weight"
                                               << "missing tensor lm_head.weight (expected shape [64, 32], BF16)";
        QTest::newRow("llama missing down_proj") << "llama"
                                                 << "remove"
                                                 << "model.layers.1.mlp.down_proj.weight"
                                                 << "(expected shape [32, 48], BF16)";
        QTest::newRow("llama missing o bias") << "llama-bias"
                                              << "remove"
                                              << "model.layers.0.self_attn.o_proj.bias"
                                              << "(expected shape [32], BF16)";
        QTest::newRow("llama missing final norm") << "llama"
                                                  << "remove"
                                                  << "model.norm.weight"
                                                  << "missing tensor model.norm.weight";
        QTest::newRow("qwen2 unexpected o bias")
            << "qwen2"
            << "add"
            << "model.layers.0.self_attn.o_proj.bias"
            << "unexpected tensor model.layers.0.self_attn.o_proj.bias: Qwen2ForCausalLM";
        QTest::newRow("qwen3 unexpected q bias") << "qwen3"
                                                 << "add"
                                                 << "model.layers.1.self_attn.q_proj.bias"
                                                 << "unexpected tensor model.layers.1.self_attn.q_proj.bias";
        QTest::newRow("llama unexpected layer") << "llama"
                                                << "add"
                                                << "model.layers.2.mlp.up_proj.weight"
                                                << "unexpected tensor model.layers.2.mlp.up_proj.weight";
        QTest::newRow("llama transposed k_proj") << "llama"
                                                 << "transpose"
                                                 << "model.layers.0.self_attn.k_proj.weight"
                                                 << "has shape [32, 16] but config.json implies [16, 32]";
        QTest::newRow("qwen2 transposed gate") << "qwen2"
                                               << "transpose"
                                               << "model.layers.1.mlp.gate_proj.weight"
                                               << "has shape [32, 64] but config.json implies [64, 32]";
        QTest::newRow("qwen2 f32 norm")
            << "qwen2"
            << "f32"
            << "model.norm.weight"
            << "tensor model.norm.weight has dtype F32 but config.json torch_dtype is bfloat16 (expected BF16)";
    }

    void checkpointErrors()
    {
        QFETCH(QString, kind);
        QFETCH(QString, action);
        QFETCH(QString, tensor);
        QFETCH(QString, expected);
        const ModelConfig config = tinyConfig(kind);
        NamedTensors tensors = tinyModelTensors(config);
        const std::string name = tensor.toStdString();
        if (action == "add") {
            tensors.emplace_back(name, at::randn({32}).to(tensors.front().second.scalar_type()));
        } else {
            auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& e) { return e.first == name; });
            QVERIFY2(it != tensors.end(), name.c_str());
            if (action == "remove") {
                tensors.erase(it);
            } else if (action == "transpose") {
                it->second = it->second.t().contiguous();
            } else {
                it->second = it->second.to(at::kFloat);
            }
        }
        const std::string directory = path("invalid_" + std::string(QTest::currentDataTag()));
        writeModelDirectory(directory, config, tensors, false);
        expectInputError([&] { openModelDirectory(directory); }, directory, {expected.toStdString()}, name);
    }

    void modelInfoCommand()
    {
        const ModelConfig config = tinyConfig("qwen2");
        const NamedTensors tensors = tinyModelTensors(config);
        const std::string directory = path("cli_qwen2");
        writeModelDirectory(directory, config, tensors, true);
        const std::int64_t parameters = elementCount(tensors);

        std::ostringstream out;
        std::ostringstream err;
        QCOMPARE(cli::run({"mismatch", "--json", "model", "info", directory}, out, err), 0);
        const nlohmann::json info = nlohmann::json::parse(out.str());
        QCOMPARE(info["architecture"].get<std::string>(), std::string("Qwen2ForCausalLM"));
        QCOMPARE(info["layers"].get<std::int64_t>(), std::int64_t(2));
        QCOMPARE(info["hidden_size"].get<std::int64_t>(), std::int64_t(32));
        QCOMPARE(info["heads"].get<std::int64_t>(), std::int64_t(4));
        QCOMPARE(info["kv_heads"].get<std::int64_t>(), std::int64_t(2));
        QCOMPARE(info["head_dim"].get<std::int64_t>(), std::int64_t(8));
        QCOMPARE(info["vocab_size"].get<std::int64_t>(), std::int64_t(64));
        QCOMPARE(info["parameters"].get<std::int64_t>(), parameters);
        QCOMPARE(info["dtypes"], nlohmann::json({{"BF16", parameters}}));
        QCOMPARE(info["bytes"].get<std::uint64_t>(), std::uint64_t(parameters) * 2);
        QCOMPARE(info["mib"].get<double>(), double(parameters) * 2 / (1024.0 * 1024.0));
        QVERIFY(info["files"].size() > 1);

        std::ostringstream table;
        QCOMPARE(cli::run({"mismatch", "model", "info", directory}, table, err), 0);
        const std::string text = table.str();
        QVERIFY2(text.find("Qwen2ForCausalLM") != std::string::npos, text.c_str());
        QVERIFY2(text.find(std::to_string(parameters)) != std::string::npos, text.c_str());
        QVERIFY2(text.find("BF16") != std::string::npos, text.c_str());
        QVERIFY2(text.find(std::to_string(parameters * 2) + " bytes") != std::string::npos, text.c_str());

        // A broken directory: exit code 1 and the tensor named on stderr.
        QVERIFY(QFile::remove(QString::fromStdString(directory + "/model.safetensors.index.json")));
        std::ostringstream brokenOut;
        std::ostringstream brokenErr;
        QCOMPARE(cli::run({"mismatch", "model", "info", directory}, brokenOut, brokenErr), 1);
        QVERIFY2(brokenErr.str().find("no checkpoint") != std::string::npos, brokenErr.str().c_str());
    }
};

MISMATCH_TEST_MAIN(TestModelIo)
#include "test_model_io.moc"
