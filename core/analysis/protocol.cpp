#include "core/analysis/protocol.h"

#include "core/common/error.h"
#include "core/common/message_text.h"

#include <filesystem>
#include <sstream>

namespace fs = std::filesystem;

namespace mismatch::analysis {

namespace {

std::string text(double value)
{
    std::ostringstream out;
    out << value;
    return out.str();
}

template <typename T>
T field(const nlohmann::json& json, const char* key, const std::string& source)
{
    if (!json.is_object() || !json.contains(key)) {
        throw InputError(source, std::string("protocol.") + key, "missing (a measurement protocol needs it)");
    }
    try {
        return json.at(key).get<T>();
    } catch (const nlohmann::json::exception& error) {
        throw InputError(source, std::string("protocol.") + key, "malformed: " + jsonErrorDetail(error));
    }
}

} // namespace

bool operator==(const MeasurementProtocol& a, const MeasurementProtocol& b)
{
    return a.prompts == b.prompts && a.count == b.count && a.maxTokens == b.maxTokens
        && a.temperature == b.temperature && a.topP == b.topP && a.topK == b.topK && a.seed == b.seed
        && a.seedPolicy == b.seedPolicy && a.kvScales == b.kvScales && a.kvFirstBatch == b.kvFirstBatch
        && a.bf16Unit == b.bf16Unit;
}

nlohmann::json protocolToJson(const MeasurementProtocol& p)
{
    return {{"prompts", p.prompts}, {"count", p.count}, {"max_tokens", p.maxTokens}, {"temperature", p.temperature},
        {"top_p", p.topP}, {"top_k", p.topK}, {"seed", p.seed}, {"seed_policy", p.seedPolicy},
        {"kv_scales", toString(p.kvScales)}, {"kv_first_batch", p.kvFirstBatch}, {"bf16_unit", p.bf16Unit}};
}

MeasurementProtocol protocolFromJson(const nlohmann::json& json, const std::string& source)
{
    MeasurementProtocol p;
    p.prompts = field<std::string>(json, "prompts", source);
    p.count = field<std::int64_t>(json, "count", source);
    p.maxTokens = field<std::int64_t>(json, "max_tokens", source);
    p.temperature = field<double>(json, "temperature", source);
    p.topP = field<double>(json, "top_p", source);
    p.topK = field<std::int64_t>(json, "top_k", source);
    p.seed = field<std::uint64_t>(json, "seed", source);
    p.seedPolicy = field<std::string>(json, "seed_policy", source);
    const std::string kv = field<std::string>(json, "kv_scales", source);
    if (kv == toString(KvScalePolicy::FrozenFirstBatch)) {
        p.kvScales = KvScalePolicy::FrozenFirstBatch;
    } else if (kv == toString(KvScalePolicy::FittedPerMeasurement)) {
        p.kvScales = KvScalePolicy::FittedPerMeasurement;
    } else {
        throw InputError(source, "protocol.kv_scales",
            "expected frozen_first_batch or fitted_per_measurement, got '" + kv + "'");
    }
    p.kvFirstBatch = field<std::int64_t>(json, "kv_first_batch", source);
    p.bf16Unit = field<std::string>(json, "bf16_unit", source);
    return p;
}

std::vector<std::string> protocolDifferences(
    const MeasurementProtocol& actual, const MeasurementProtocol& reference, const std::string& referenceName)
{
    std::vector<std::string> differences;
    const auto note = [&](const std::string& key, const std::string& mine, const std::string& theirs) {
        if (mine != theirs) {
            differences.push_back(key + " " + mine + " (" + referenceName + ": " + theirs + ")");
        }
    };
    note("prompts", actual.prompts, reference.prompts);
    note("count", std::to_string(actual.count), std::to_string(reference.count));
    note("max_tokens", std::to_string(actual.maxTokens), std::to_string(reference.maxTokens));
    note("temperature", text(actual.temperature), text(reference.temperature));
    note("top_p", text(actual.topP), text(reference.topP));
    note("top_k", std::to_string(actual.topK), std::to_string(reference.topK));
    note("seed", std::to_string(actual.seed), std::to_string(reference.seed));
    note("seed_policy", actual.seedPolicy, reference.seedPolicy);
    note("kv_scales", toString(actual.kvScales), toString(reference.kvScales));
    if (actual.kvScales == KvScalePolicy::FrozenFirstBatch && reference.kvScales == KvScalePolicy::FrozenFirstBatch) {
        note("kv_first_batch", std::to_string(actual.kvFirstBatch), std::to_string(reference.kvFirstBatch));
    }
    note("bf16_unit", actual.bf16Unit, reference.bf16Unit);
    return differences;
}

MeasurementProtocol calibrationProtocol(const train::RunConfig& base, std::int64_t probeCount)
{
    MeasurementProtocol p;
    p.prompts = fs::absolute(base.prompts).lexically_normal().string();
    p.count = probeCount;
    p.maxTokens = base.rollout.sampling.maxTokens;
    p.temperature = base.rollout.sampling.temperature;
    p.topP = base.rollout.sampling.topP;
    p.topK = base.rollout.sampling.topK;
    p.seed = base.rollout.sampling.seed;
    p.kvScales = KvScalePolicy::FrozenFirstBatch;
    p.kvFirstBatch = base.batch.promptsPerStep * base.batch.samplesPerPrompt;
    return p;
}

MeasurementProtocol settingsProtocol(const std::string& promptSet, std::int64_t count, const MeasureSettings& settings)
{
    MeasurementProtocol p;
    p.prompts = fs::absolute(promptSet).lexically_normal().string();
    p.count = count;
    p.maxTokens = settings.maxNewTokens;
    p.temperature = settings.temperature;
    p.topP = settings.topP;
    p.topK = settings.topK;
    p.seed = settings.seed;
    p.kvScales = settings.kvScales;
    p.kvFirstBatch = settings.kvScales == KvScalePolicy::FrozenFirstBatch ? settings.kvFirstBatch : 0;
    return p;
}

MeasureSettings applyProtocol(const MeasurementProtocol& protocol, MeasureSettings settings)
{
    settings.maxNewTokens = protocol.maxTokens;
    settings.temperature = protocol.temperature;
    settings.topP = protocol.topP;
    settings.topK = protocol.topK;
    settings.seed = protocol.seed;
    settings.kvScales = protocol.kvScales;
    settings.kvFirstBatch = protocol.kvFirstBatch;
    return settings;
}

nlohmann::json toJson(const metrics::Interval& interval)
{
    return {{"estimate", interval.estimate}, {"low", interval.low}, {"high", interval.high},
        {"confidence", interval.confidence}, {"resamples", interval.resamples}};
}

} // namespace mismatch::analysis
