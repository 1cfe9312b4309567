// Log import: Tinker's run configuration. The config.json beside a Tinker metrics.jsonl (num_substeps,
// async_config), read into TinkerRunConfig, which says whether kl_sample_train_* includes policy drift.
#include "core/io/import_log_internal.h"

#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/message_text.h"

#include <algorithm>
#include <filesystem>

namespace mismatch::io {

namespace importing {

namespace {

// A whole number in a JSON value (Python writes ints without a fraction), or nullopt.
std::optional<std::int64_t> jsonWholeNumber(const json& value)
{
    if (value.is_number_integer()) {
        return value.get<std::int64_t>();
    }
    return std::nullopt;
}

std::string describeJson(const json& value)
{
    if (value.is_string()) {
        const auto& text = value.get_ref<const std::string&>();
        return !text.empty() && text[0] == kNonFiniteMark ? text.substr(1) : "the string " + value.dump();
    }
    return value.is_number() || value.is_boolean() ? value.dump() : std::string("a JSON ") + value.type_name();
}

} // namespace

// Tinker's config.json beside `logPath` (tinker_cookbook/utils/ml_log.py JsonLogger.log_hparams writes the run's
// Config there; rl/train.py Config has num_substeps and async_config, whose AsyncConfig in released
// tinker-cookbook (v0.5.5, 9dfcc3a2cf44432d621a01005073dc6d76a1e87a) has max_steps_off_policy and groups_per_batch
// only). pipeline_depth exists only on the unmerged branch async-rl-blocking-staleness (its CHANGELOG: "a new
// pipeline_depth"): read when a config.json has it, recorded only then. Missing file: nothing recorded. A file that
// cannot be used: the located reason in `problem`.
std::optional<TinkerRunConfig> readTinkerConfig(const std::string& logPath, std::string& problem)
{
    const std::string path = (std::filesystem::path(logPath).parent_path() / "config.json").string();
    if (pathKind(path) == PathKind::Missing) {
        return std::nullopt;
    }
    try {
        const std::string text = readInputFile(path, limits::kConfigFile, "Tinker config.json");
        if (const std::size_t deep = jsonNestingTooDeep(text.data(), text.data() + text.size());
            deep != std::string::npos) {
            throw InputError(path, lineColumnOf(text.data(), text.data() + text.size(), deep), nestingTooDeepDetail());
        }
        json config;
        const std::string marked = markNonFiniteTokens(text); // Python's json writes NaN and Infinity bare
        try {
            config = json::parse(marked);
        } catch (const json::parse_error& error) {
            // error.byte counts the characters read, the offending one included (lines are the same in `marked`).
            const std::size_t at = std::min<std::size_t>(error.byte > 0 ? error.byte - 1 : 0, marked.size());
            throw InputError(path, lineColumnOf(marked.data(), marked.data() + marked.size(), at), "bad JSON");
        } catch (const json::exception& error) {
            throw InputError(path, "", "bad JSON: " + jsonErrorDetail(error));
        }
        if (!config.is_object()) {
            throw InputError(path, "", std::string("expected a JSON object, got a JSON ") + config.type_name());
        }
        TinkerRunConfig run;
        run.file = path;
        if (const auto substeps = config.find("num_substeps"); substeps != config.end()) {
            const auto value = jsonWholeNumber(*substeps);
            if (!value || *value < 1) {
                throw InputError(path, "num_substeps", "is " + describeJson(*substeps) + ", expected a whole number of 1 or more");
            }
            run.numSubsteps = value;
        }
        if (const auto async = config.find("async_config"); async != config.end()) {
            run.asyncRecorded = true;
            if (!async->is_null()) {
                if (!async->is_object()) {
                    throw InputError(path, "async_config", "is " + describeJson(*async) + ", expected null or an object");
                }
                const auto field = [&](const char* name, std::int64_t minimum, bool nullable) -> std::optional<std::int64_t> {
                    const auto found = async->find(name);
                    if (found == async->end() || (nullable && found->is_null())) {
                        if (nullable) {
                            return std::nullopt;
                        }
                        throw InputError(path, std::string("async_config.") + name, "is missing");
                    }
                    const auto value = jsonWholeNumber(*found);
                    if (!value || *value < minimum) {
                        throw InputError(path, std::string("async_config.") + name, "is " + describeJson(*found)
                                + ", expected a whole number of " + std::to_string(minimum) + " or more");
                    }
                    return value;
                };
                run.maxStepsOffPolicy = field("max_steps_off_policy", 0, false);
                run.groupsPerBatch = field("groups_per_batch", 1, false);
                run.pipelineDepth = field("pipeline_depth", 0, true);
            }
        }
        return run;
    } catch (const InputError& error) {
        problem = error.what();
        return std::nullopt;
    }
}

} // namespace importing

bool TinkerRunConfig::includesPolicyDrift() const
{
    return (numSubsteps && *numSubsteps > 1) || (maxStepsOffPolicy && *maxStepsOffPolicy > 0);
}

std::string TinkerRunConfig::json() const
{
    nlohmann::json record = nlohmann::json::object();
    record["file"] = file;
    record["num_substeps"] = numSubsteps ? nlohmann::json(*numSubsteps) : nlohmann::json(nullptr);
    if (!asyncRecorded) {
        record["async_config"] = "not in config.json";
    } else if (!maxStepsOffPolicy) {
        record["async_config"] = nullptr; // synchronous training
    } else {
        record["async_config"] = {{"max_steps_off_policy", *maxStepsOffPolicy}, {"groups_per_batch", *groupsPerBatch}};
        if (pipelineDepth) {
            // Not in released tinker-cookbook's AsyncConfig (see readTinkerConfig): kept only when the file has it.
            record["async_config"]["pipeline_depth"] = *pipelineDepth;
        }
    }
    record["kl_sample_train_includes_policy_drift"] = includesPolicyDrift();
    return record.dump();
}

} // namespace mismatch::io
