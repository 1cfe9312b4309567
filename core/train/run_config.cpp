#include "core/train/run_config.h"

#include "core/common/device.h"
#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/message_text.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/store/run_store.h"
#include "core/store/sqlite_util.h"

#include <nlohmann/json.hpp>
#include "core/common/yaml_mapping.h"
#include "core/common/yaml_scalar.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace fs = std::filesystem;

namespace mismatch::train {

namespace {

const std::vector<std::pair<Objective, const char*>>& objectiveTable()
{
    static const std::vector<std::pair<Objective, const char*>> table
        = {{Objective::OpdFullKl, "opd_full_kl"}, {Objective::OpdK1, "opd_k1"}, {Objective::OpdK3, "opd_k3"},
            {Objective::OpdTopK, "opd_topk"}, {Objective::Reinforce, "reinforce"}, {Objective::Grpo, "grpo"}};
    return table;
}

const std::vector<std::pair<CorrectionKind, const char*>>& correctionTable()
{
    static const std::vector<std::pair<CorrectionKind, const char*>> table
        = {{CorrectionKind::None, "none"}, {CorrectionKind::Tis, "tis"}, {CorrectionKind::Mis, "mis"}};
    return table;
}

} // namespace

std::string toString(Objective objective)
{
    for (const auto& [value, name] : objectiveTable()) {
        if (value == objective) {
            return name;
        }
    }
    return "opd_full_kl";
}

std::optional<Objective> objectiveFromString(const std::string& text)
{
    for (const auto& [value, name] : objectiveTable()) {
        if (text == name) {
            return value;
        }
    }
    return std::nullopt;
}

std::string objectiveNames()
{
    std::string names;
    for (const auto& entry : objectiveTable()) {
        names += (names.empty() ? "" : ", ") + std::string(entry.second);
    }
    return names;
}

bool usesTeacher(Objective objective)
{
    return objective != Objective::Reinforce && objective != Objective::Grpo;
}

std::string toString(CorrectionKind kind)
{
    for (const auto& [value, name] : correctionTable()) {
        if (value == kind) {
            return name;
        }
    }
    return "none";
}

std::optional<CorrectionKind> correctionKindFromString(const std::string& text)
{
    for (const auto& [value, name] : correctionTable()) {
        if (text == name) {
            return value;
        }
    }
    return std::nullopt;
}

bool operator==(const RunConfig& a, const RunConfig& b)
{
    const auto tie = [](const RunConfig& c) {
        return std::make_tuple(c.name, c.student, c.teacher, c.prompts, c.objective.kind, c.objective.topK,
            c.correction.kind, c.correction.cap, c.rollout.recipe, c.rollout.staleness, c.rollout.noise.sigma,
            c.rollout.noise.seed, c.rollout.noise.modules, c.rollout.sampling.temperature, c.rollout.sampling.topP,
            c.rollout.sampling.topK, c.rollout.sampling.maxTokens, c.rollout.sampling.seed, c.rollout.asynchronous,
            c.optimizer.learningRate, c.optimizer.warmupSteps, c.optimizer.weightDecay, c.optimizer.gradientClip,
            c.optimizer.beta1, c.optimizer.beta2, c.batch.promptsPerStep, c.batch.samplesPerPrompt, c.steps,
            c.evaluation.every, c.evaluation.prompts, c.evaluation.count, c.evaluation.maxTokens,
            c.evaluation.bf16UnitEvery, c.checkpoint.every, c.seed, c.threads, c.device);
    };
    return tie(a) == tie(b);
}

namespace {

using io::isDigits;
using io::kindName;
using io::ScalarKind;
using io::scalarKind;

using io::lineColumn;
using io::SourceLocation;
using Entry = io::YamlEntry;
using Reader = io::YamlMappingReader;

// Whether the parsed text is a run file, whose run's name must be a run name (runNameProblem), or a stored
// configuration, which keeps the name its run was given.
enum class NameRule { RunFile, AnyName };

class Parser {
public:
    Parser(std::string file, fs::path baseDirectory, NameRule nameRule)
        : file_(std::move(file))
        , base_(std::move(baseDirectory))
        , nameRule_(nameRule)
        , reader_([this](const SourceLocation& where, const std::string& detail) { fail(where, detail); },
              Reader::UnknownKeyAt::Mapping)
    {
    }

    RunConfig parse(const YAML::Node& root);

private:
    [[noreturn]] void fail(const SourceLocation& where, const std::string& detail) const
    {
        const std::string message = where.keyPath.empty() ? detail : where.keyPath + ": " + detail;
        throw InputError(file_, where.line > 0 ? lineColumn(where) : std::string(), message);
    }

    bool boolValue(const Entry& entry) const
    {
        if (!entry.value.IsScalar() || scalarKind(entry.value) != ScalarKind::Boolean) {
            fail(entry.valueLocation, "expected true or false, got " + kindName(entry.value));
        }
        const std::string& text = entry.value.Scalar();
        return text == "true" || text == "True" || text == "TRUE";
    }

    double numberValue(const YAML::Node& node, const SourceLocation& where) const
    {
        const ScalarKind kind = node.IsScalar() ? scalarKind(node) : ScalarKind::String;
        if (!node.IsScalar() || (kind != ScalarKind::Integer && kind != ScalarKind::Number)) {
            fail(where, "expected a number, got " + kindName(node));
        }
        double value = 0.0;
        try {
            value = io::numberOf(node);
        } catch (const std::exception&) {
            fail(where, "number '" + node.Scalar() + "' is out of range");
        }
        if (!std::isfinite(value)) {
            fail(where, "expected a finite number, got " + node.Scalar());
        }
        // Training applies these in float32 arithmetic; beyond its range a value can only overflow there.
        if (std::fabs(value) > std::numeric_limits<float>::max()) {
            fail(where, "number " + node.Scalar() + " is beyond the float32 range (+-3.4e38) the trainer computes in");
        }
        return value;
    }

    double numberValue(const Entry& entry) const { return numberValue(entry.value, entry.valueLocation); }

    std::int64_t integerValue(const Entry& entry, std::int64_t minimum) const
    {
        if (!entry.value.IsScalar() || scalarKind(entry.value) != ScalarKind::Integer) {
            fail(entry.valueLocation, "expected an integer, got " + kindName(entry.value));
        }
        std::int64_t value = 0;
        try {
            value = std::stoll(entry.value.Scalar());
        } catch (const std::exception&) {
            fail(entry.valueLocation, "integer " + entry.value.Scalar() + " is out of range");
        }
        if (value < minimum) {
            fail(entry.valueLocation, "must be at least " + std::to_string(minimum) + ", got " + std::to_string(value));
        }
        return value;
    }

    std::uint64_t seedValue(const Entry& entry) const
    {
        if (!entry.value.IsScalar() || scalarKind(entry.value) != ScalarKind::Integer) {
            fail(entry.valueLocation, "expected an integer seed, got " + kindName(entry.value));
        }
        const std::string& text = entry.value.Scalar();
        if (text[0] == '-') {
            fail(entry.valueLocation, "a seed must not be negative, got " + text);
        }
        try {
            return static_cast<std::uint64_t>(std::stoull(text));
        } catch (const std::exception&) {
            fail(entry.valueLocation, "seed " + text + " does not fit in 64 bits");
        }
    }

    double rangedNumber(const Entry& entry, double low, bool lowInclusive, double high, bool highInclusive) const
    {
        const double value = numberValue(entry);
        const bool aboveLow = lowInclusive ? value >= low : value > low;
        const bool belowHigh = highInclusive ? value <= high : value < high;
        if (!aboveLow || !belowHigh) {
            std::ostringstream range;
            range << (lowInclusive ? "[" : "(") << low << ", ";
            if (std::isinf(high)) {
                range << "infinity)";
            } else {
                range << high << (highInclusive ? "]" : ")");
            }
            fail(entry.valueLocation, "must be in " + range.str() + ", got " + entry.value.Scalar());
        }
        return value;
    }

    enum class PathKind { ModelDirectory, File };

    std::string pathValue(const Entry& entry, PathKind kind, const std::string& what) const
    {
        const std::string text = reader_.stringValue(entry);
        if (text.empty()) {
            fail(entry.valueLocation, "expected a path to the " + what + ", got an empty string");
        }
        fs::path path(text);
        if (path.is_relative()) {
            path = base_ / path;
        }
        path = path.lexically_normal();
        const std::string shown = path.string()
            + (fs::path(text).is_relative() ? " (resolved against the run file's directory " + base_.string() + ")"
                                            : "");
        mismatch::PathKind found = mismatch::PathKind::Missing;
        try {
            found = mismatch::pathKind(path.string());
        } catch (const InputError& error) { // a symbolic-link loop, a name too long, a directory not searchable
            fail(entry.valueLocation, what + " " + shown + ": " + error.detail());
        }
        if (found == mismatch::PathKind::Missing) {
            fail(entry.valueLocation, what + " " + shown + " does not exist");
        }
        if (kind == PathKind::ModelDirectory) {
            if (found != mismatch::PathKind::Directory) {
                fail(entry.valueLocation, what + " " + shown + " is not a directory");
            }
            std::error_code error;
            if (!fs::exists(path / "config.json", error)) {
                fail(entry.valueLocation, what + " " + shown + " has no config.json (expected a model directory)");
            }
        } else if (found == mismatch::PathKind::Directory) {
            fail(entry.valueLocation, what + " " + shown + " is a directory, expected a file");
        }
        return path.string();
    }

    void objective(const Entry& entry, RunConfig& config);
    void correction(const Entry& entry, RunConfig& config);
    void rollout(const Entry& entry, RunConfig& config);
    void optimizer(const Entry& entry, RunConfig& config);
    void evaluation(const Entry& entry, RunConfig& config);
    // The run's name: the `name` entry when given, else the file's stem (`top`: where the file starts).
    std::string runName(const Entry* entry, const SourceLocation& top) const;
    void requireTopKWithinVocabulary(const RunConfig& config) const;

    std::string file_;
    fs::path base_;
    NameRule nameRule_;
    Reader reader_;
    // Where things were written, for the cross-field rules.
    std::optional<SourceLocation> objectivePlace_;
    std::optional<SourceLocation> topKPlace_;
    std::optional<SourceLocation> correctionKindPlace_;
    std::optional<SourceLocation> capPlace_;
    std::optional<SourceLocation> samplesPerPromptPlace_;
    std::optional<SourceLocation> evaluationEveryPlace_;
};

std::string Parser::runName(const Entry* entry, const SourceLocation& top) const
{
    if (!entry) {
        const std::string stem = fs::path(file_).stem().string();
        if (nameRule_ == NameRule::RunFile) {
            if (const std::string problem = runNameProblem(stem); !problem.empty()) {
                fail(top, "the run is named by the file's stem, and " + problem + "; give it a `name`");
            }
        }
        return stem;
    }
    const std::string name = reader_.stringValue(*entry);
    if (name.empty()) {
        fail(entry->valueLocation, "expected a non-empty name");
    }
    if (nameRule_ == NameRule::RunFile) {
        if (const std::string problem = runNameProblem(name); !problem.empty()) {
            fail(entry->valueLocation, problem);
        }
    }
    return name;
}

void Parser::objective(const Entry& entry, RunConfig& config)
{
    objectivePlace_ = entry.valueLocation;
    const Entry* nameEntry = &entry;
    std::vector<Entry> list;
    if (entry.value.IsMap()) {
        list = reader_.entries(entry.value, entry.valueLocation, {"name", "top_k"});
        nameEntry = Reader::find(list, "name");
        if (!nameEntry) {
            fail(entry.valueLocation, "missing required key 'name'");
        }
    }
    const std::string name = reader_.stringValue(*nameEntry);
    const auto kind = objectiveFromString(name);
    if (!kind) {
        fail(nameEntry->valueLocation, "unknown objective '" + name + "' (valid: " + objectiveNames() + ")");
    }
    config.objective.kind = *kind;
    objectivePlace_ = nameEntry->valueLocation;
    if (const Entry* topK = Reader::find(list, "top_k")) {
        if (*kind != Objective::OpdTopK) {
            fail(topK->keyLocation, "only the opd_topk objective takes top_k, not " + name);
        }
        config.objective.topK = integerValue(*topK, 1);
        topKPlace_ = topK->valueLocation;
    } else if (*kind == Objective::OpdTopK) {
        fail(nameEntry->valueLocation, "opd_topk needs its k: write `objective: {name: opd_topk, top_k: 32}`");
    }
}

void Parser::correction(const Entry& entry, RunConfig& config)
{
    const auto list = reader_.entries(entry.value, entry.valueLocation, {"kind", "cap"});
    if (const Entry* kind = Reader::find(list, "kind")) {
        const std::string text = reader_.stringValue(*kind);
        const auto value = correctionKindFromString(text);
        if (!value) {
            fail(kind->valueLocation, "unknown correction '" + text + "' (valid: none, tis, mis)");
        }
        config.correction.kind = *value;
        correctionKindPlace_ = kind->valueLocation;
    } else {
        fail(entry.valueLocation, "missing required key 'kind' (none, tis or mis)");
    }
    if (const Entry* cap = Reader::find(list, "cap")) {
        if (config.correction.kind == CorrectionKind::None) {
            fail(cap->keyLocation, "a cap has no effect with kind none (use kind tis or mis, or remove the cap)");
        }
        config.correction.cap = numberValue(*cap);
        capPlace_ = cap->valueLocation;
    }
}

void Parser::rollout(const Entry& entry, RunConfig& config)
{
    const auto list
        = reader_.entries(entry.value, entry.valueLocation, {"recipe", "staleness", "noise", "sampling", "asynchronous"});
    if (const Entry* recipe = Reader::find(list, "recipe")) {
        config.rollout.recipe = pathValue(*recipe, PathKind::File, "recipe");
        try {
            quant::loadRecipe(config.rollout.recipe);
        } catch (const InputError& error) {
            throw InputError(error.file(), error.location(),
                error.detail() + " (recipe named by " + file_ + ", " + lineColumn(recipe->valueLocation) + ")");
        }
    }
    if (const Entry* staleness = Reader::find(list, "staleness")) {
        config.rollout.staleness = integerValue(*staleness, 0);
    }
    if (const Entry* asynchronous = Reader::find(list, "asynchronous")) {
        config.rollout.asynchronous = boolValue(*asynchronous);
    }
    if (const Entry* noise = Reader::find(list, "noise")) {
        const auto fields = reader_.entries(noise->value, noise->valueLocation, {"sigma", "seed", "modules"});
        if (const Entry* sigma = Reader::find(fields, "sigma")) {
            config.rollout.noise.sigma = rangedNumber(*sigma, 0.0, true, INFINITY, false);
            if (config.rollout.noise.sigma > limits::kMaxNoiseSigma) {
                fail(sigma->valueLocation,
                    "must be <= " + numberText(limits::kMaxNoiseSigma) + ", got " + sigma->value.Scalar() + ": "
                        + limits::kMaxNoiseSigmaReason);
            }
        }
        if (const Entry* seed = Reader::find(fields, "seed")) {
            config.rollout.noise.seed = seedValue(*seed);
        }
        if (const Entry* modules = Reader::find(fields, "modules")) {
            const std::string pattern = reader_.stringValue(*modules);
            try {
                quant::ModulePattern::compile(pattern);
            } catch (const std::invalid_argument& error) {
                fail(modules->valueLocation, "malformed module pattern \"" + pattern + "\": " + error.what());
            }
            config.rollout.noise.modules = pattern;
        }
    }
    if (const Entry* sampling = Reader::find(list, "sampling")) {
        const auto fields
            = reader_.entries(sampling->value, sampling->valueLocation, {"temperature", "top_p", "top_k", "max_tokens", "seed"});
        SamplingConfig& s = config.rollout.sampling;
        if (const Entry* e = Reader::find(fields, "temperature")) {
            s.temperature = rangedNumber(*e, 0.0, true, INFINITY, false);
        }
        if (const Entry* e = Reader::find(fields, "top_p")) {
            s.topP = rangedNumber(*e, 0.0, false, 1.0, true);
        }
        if (const Entry* e = Reader::find(fields, "top_k")) {
            s.topK = integerValue(*e, 0);
        }
        if (const Entry* e = Reader::find(fields, "max_tokens")) {
            s.maxTokens = integerValue(*e, 1);
        }
        if (const Entry* e = Reader::find(fields, "seed")) {
            s.seed = seedValue(*e);
        }
    }
}

void Parser::optimizer(const Entry& entry, RunConfig& config)
{
    const auto list = reader_.entries(
        entry.value, entry.valueLocation, {"learning_rate", "warmup_steps", "weight_decay", "gradient_clip", "betas"});
    OptimizerConfig& o = config.optimizer;
    if (const Entry* e = Reader::find(list, "learning_rate")) {
        o.learningRate = rangedNumber(*e, 0.0, false, INFINITY, false);
        // AdamW updates the float32 master weights: a rate below float32's smallest normal number is 0 there (or
        // a subnormal that no update survives), so the run would train nothing.
        if (o.learningRate < static_cast<double>(std::numeric_limits<float>::min())) {
            fail(e->valueLocation,
                "is " + e->value.Scalar() + ", below float32's smallest normal number (1.18e-38), where the optimizer "
                    "updates the weights: it would train nothing");
        }
    }
    if (const Entry* e = Reader::find(list, "warmup_steps")) {
        o.warmupSteps = integerValue(*e, 0);
    }
    if (const Entry* e = Reader::find(list, "weight_decay")) {
        o.weightDecay = rangedNumber(*e, 0.0, true, INFINITY, false);
        // AdamW's decoupled decay multiplies every weight by 1 - lr * weight_decay each step (core/train/adamw.h), at
        // the peak rate learning_rate once warmup is over: from a product of 1 that factor zeroes the weights, above
        // it flips their sign (and above 2 makes them grow without bound).
        const double product = o.learningRate * o.weightDecay;
        if (product >= 1.0) {
            fail(e->valueLocation,
                "is " + e->value.Scalar() + ", and times learning_rate (" + numberText(o.learningRate) + ") that is "
                    + numberText(product) + ", at least 1: AdamW multiplies the weights by 1 - learning_rate * "
                    "weight_decay every step, which would zero them or flip their sign; keep the product below 1");
        }
    }
    if (const Entry* e = Reader::find(list, "gradient_clip")) {
        o.gradientClip = rangedNumber(*e, 0.0, true, INFINITY, false);
    }
    if (const Entry* e = Reader::find(list, "betas")) {
        if (!e->value.IsSequence() || e->value.size() != 2) {
            fail(e->valueLocation,
                "expected a list of two numbers [beta1, beta2], got "
                    + (e->value.IsSequence() ? "a list of " + std::to_string(e->value.size()) : kindName(e->value)));
        }
        double betas[2] = {0.0, 0.0};
        for (std::size_t i = 0; i < 2; ++i) {
            const YAML::Node item = e->value[i];
            const SourceLocation where = io::locate(item, e->keyLocation.keyPath + "[" + std::to_string(i) + "]");
            betas[i] = numberValue(item, where);
            if (betas[i] < 0.0 || betas[i] >= 1.0) {
                fail(where, "must be in [0, 1), got " + item.Scalar());
            }
        }
        o.beta1 = betas[0];
        o.beta2 = betas[1];
    }
}

void Parser::evaluation(const Entry& entry, RunConfig& config)
{
    const auto list
        = reader_.entries(entry.value, entry.valueLocation, {"every", "prompts", "count", "max_tokens", "bf16_unit_every"});
    EvaluationConfig& e = config.evaluation;
    if (const Entry* every = Reader::find(list, "every")) {
        e.every = integerValue(*every, 0);
        evaluationEveryPlace_ = every->valueLocation;
    }
    if (const Entry* prompts = Reader::find(list, "prompts")) {
        e.prompts = pathValue(*prompts, PathKind::File, "evaluation prompt set");
    }
    if (const Entry* count = Reader::find(list, "count")) {
        e.count = integerValue(*count, 0);
    }
    if (const Entry* maxTokens = Reader::find(list, "max_tokens")) {
        e.maxTokens = integerValue(*maxTokens, 1);
    }
    if (const Entry* unit = Reader::find(list, "bf16_unit_every")) {
        e.bf16UnitEvery = integerValue(*unit, 0);
    }
}

RunConfig Parser::parse(const YAML::Node& root)
{
    SourceLocation top = io::locate(root, "");
    if (top.line == 0) {
        top.line = 1;
        top.column = 1;
    }
    if (!root.IsDefined() || root.IsNull()) {
        fail(top, "empty run file (expected a mapping with at least `student` and `prompts`)");
    }
    const auto list = reader_.entries(root, top,
        {"name", "student", "teacher", "prompts", "objective", "correction", "rollout", "optimizer", "batch", "steps",
            "evaluation", "checkpoint", "seed", "threads", "device"});
    RunConfig config;
    config.sourceFile = file_;
    config.name = runName(Reader::find(list, "name"), top);
    const Entry* student = Reader::find(list, "student");
    if (!student) {
        fail(top, "missing required key 'student' (the student model directory)");
    }
    config.student = pathValue(*student, PathKind::ModelDirectory, "student model directory");
    const Entry* teacher = Reader::find(list, "teacher");
    if (teacher) {
        config.teacher = pathValue(*teacher, PathKind::ModelDirectory, "teacher model directory");
    }
    const Entry* prompts = Reader::find(list, "prompts");
    if (!prompts) {
        fail(top, "missing required key 'prompts' (the training prompt set)");
    }
    config.prompts = pathValue(*prompts, PathKind::File, "training prompt set");
    if (const Entry* e = Reader::find(list, "objective")) {
        objective(*e, config);
    }
    if (const Entry* e = Reader::find(list, "correction")) {
        correction(*e, config);
    }
    if (const Entry* e = Reader::find(list, "rollout")) {
        rollout(*e, config);
    }
    if (const Entry* e = Reader::find(list, "optimizer")) {
        optimizer(*e, config);
    }
    if (const Entry* e = Reader::find(list, "batch")) {
        const auto fields = reader_.entries(e->value, e->valueLocation, {"prompts_per_step", "samples_per_prompt"});
        if (const Entry* f = Reader::find(fields, "prompts_per_step")) {
            config.batch.promptsPerStep = integerValue(*f, 1);
        }
        if (const Entry* f = Reader::find(fields, "samples_per_prompt")) {
            config.batch.samplesPerPrompt = integerValue(*f, 1);
            samplesPerPromptPlace_ = f->valueLocation;
        }
    }
    if (const Entry* e = Reader::find(list, "steps")) {
        config.steps = integerValue(*e, 1);
    }
    if (const Entry* e = Reader::find(list, "evaluation")) {
        evaluation(*e, config);
    }
    if (const Entry* e = Reader::find(list, "checkpoint")) {
        const auto fields = reader_.entries(e->value, e->valueLocation, {"every"});
        if (const Entry* f = Reader::find(fields, "every")) {
            config.checkpoint.every = integerValue(*f, 0);
        }
    }
    if (const Entry* e = Reader::find(list, "seed")) {
        config.seed = seedValue(*e);
    }
    if (const Entry* e = Reader::find(list, "threads")) {
        config.threads = integerValue(*e, 0);
        const auto cores = static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
        if (config.threads > cores) {
            fail(e->valueLocation,
                "must be 0 (one per core) to " + std::to_string(cores) + " (the cores of this machine), got "
                    + std::to_string(config.threads));
        }
    }

    if (const Entry* e = Reader::find(list, "device")) {
        // The spelling only: whether this machine has the device is checked when the run starts (Trainer).
        const std::string text = reader_.stringValue(*e);
        try {
            config.device = canonicalDevice(text, file_, "device");
        } catch (const InputError& error) {
            fail(e->valueLocation, error.detail());
        }
    }

    // Cross-field rules.
    const SourceLocation objectivePlace = objectivePlace_.value_or(top);
    if (usesTeacher(config.objective.kind) && config.teacher.empty()) {
        fail(objectivePlace,
            "objective " + toString(config.objective.kind)
                + " distills from a teacher: give `teacher` (a model directory)");
    }
    if (config.objective.kind == Objective::Grpo && config.batch.samplesPerPrompt < 2) {
        fail(samplesPerPromptPlace_.value_or(objectivePlace),
            "grpo needs batch.samples_per_prompt >= 2 (its advantages are relative to the other samples of the "
            "same prompt), got "
                + std::to_string(config.batch.samplesPerPrompt));
    }
    if (config.correction.kind != CorrectionKind::None && !(config.correction.cap > 1.0)) {
        std::ostringstream cap;
        cap << config.correction.cap;
        fail(capPlace_.value_or(correctionKindPlace_.value_or(top)),
            toString(config.correction.kind)
                + " needs a cap > 1 (importance ratios are truncated or masked above it), got " + cap.str());
    }
    if (config.evaluation.every > 0 && config.evaluation.prompts.empty()) {
        fail(*evaluationEveryPlace_, "periodic evaluation needs evaluation.prompts (a held-out prompt set)");
    }
    if (config.evaluation.every > 0 && config.teacher.empty()) {
        fail(*evaluationEveryPlace_,
            "periodic evaluation needs a teacher: quality is the student's KL to the teacher on held-out prompts "
            "(give `teacher`; reinforce and grpo do not train on it)");
    }
    requireTopKWithinVocabulary(config);
    return config;
}

// opd_topk's k at most the student's vocabulary (read from its config.json), before anything starts: the
// objective would otherwise fail inside the first step. A config.json that cannot be read is left to the
// model's own checks when the run loads it.
void Parser::requireTopKWithinVocabulary(const RunConfig& config) const
{
    if (config.objective.kind != Objective::OpdTopK || !topKPlace_) {
        return;
    }
    std::int64_t vocabulary = 0;
    try {
        vocabulary = model::loadConfig((std::filesystem::path(config.student) / "config.json").string()).vocabSize;
    } catch (const std::exception&) {
        return;
    }
    if (vocabulary > 0 && config.objective.topK > vocabulary) {
        fail(*topKPlace_,
            "opd_topk's top_k is " + std::to_string(config.objective.topK) + ", more than the student's vocabulary of "
                + std::to_string(vocabulary) + " tokens (" + config.student + "/config.json vocab_size); top_k "
                + "must lie in 1.." + std::to_string(vocabulary));
    }
}

} // namespace

RunConfig parseRunConfig(const std::string& text, const std::string& fileName, const std::string& baseDirectory)
{
    return Parser(fileName, fs::path(baseDirectory), NameRule::AnyName).parse(io::loadYaml(text, fileName));
}

RunConfig loadRunConfig(const std::string& path)
{
    const std::string text = readInputFile(path, limits::kConfigFile, "run file");
    std::error_code error;
    fs::path directory = fs::absolute(fs::path(path), error).parent_path();
    if (error) {
        directory = fs::path(path).parent_path();
    }
    return Parser(path, directory, NameRule::RunFile).parse(io::loadYaml(text, path));
}

std::string runNameProblem(const std::string& name)
{
    // ASCII only, whatever the locale.
    const auto letterOrDigit
        = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'); };
    const auto allowed = [&](char c) { return letterOrDigit(c) || c == '.' || c == '_' || c == '-'; };
    if (!name.empty() && letterOrDigit(name.front()) && std::all_of(name.begin(), name.end(), allowed)) {
        return {};
    }
    return "'" + name
        + "' is not a run name: expected letters, digits, '.', '_' or '-', starting with a letter or digit (the name "
          "also names the run's files)";
}

std::string runNameTaken(const store::RunStore& store, const std::string& name)
{
    if (!runNameProblem(name).empty()) {
        return {}; // an analysis's BASE/PART run: a repeated analysis trains it again under the same name
    }
    store::Statement query(
        store.handle(), "SELECT id, status FROM runs WHERE kind = 'train' AND name = ? ORDER BY id LIMIT 1");
    query.bind(1, name);
    if (!query.step()) {
        return {};
    }
    const std::string id = std::to_string(query.int64(0));
    const store::RunStatus status = store::runStatusFromString(query.text(1));
    const std::string taken = "'" + name + "' is already used by training run " + id + " (" + store::toString(status)
        + ") in this workspace";
    if (status == store::RunStatus::Finished) {
        return taken + "; give this run another name";
    }
    // A run that stopped (killed, cancelled, failed, --stop-after) is continued, not started again under its name.
    return taken + ": continue that run with `mismatch train --resume " + id + "`, or give this run another name";
}

std::string runConfigToJson(const RunConfig& c)
{
    nlohmann::ordered_json j;
    j["name"] = c.name;
    j["student"] = c.student;
    if (!c.teacher.empty()) {
        j["teacher"] = c.teacher;
    }
    j["prompts"] = c.prompts;
    if (c.objective.kind == Objective::OpdTopK) {
        j["objective"] = {{"name", toString(c.objective.kind)}, {"top_k", c.objective.topK}};
    } else {
        j["objective"] = toString(c.objective.kind);
    }
    j["correction"] = {{"kind", toString(c.correction.kind)}};
    if (c.correction.kind != CorrectionKind::None) {
        j["correction"]["cap"] = c.correction.cap;
    }
    nlohmann::ordered_json rollout;
    if (!c.rollout.recipe.empty()) {
        rollout["recipe"] = c.rollout.recipe;
    }
    rollout["staleness"] = c.rollout.staleness;
    rollout["asynchronous"] = c.rollout.asynchronous;
    rollout["noise"]
        = {{"sigma", c.rollout.noise.sigma}, {"seed", c.rollout.noise.seed}, {"modules", c.rollout.noise.modules}};
    rollout["sampling"] = {{"temperature", c.rollout.sampling.temperature}, {"top_p", c.rollout.sampling.topP},
        {"top_k", c.rollout.sampling.topK}, {"max_tokens", c.rollout.sampling.maxTokens},
        {"seed", c.rollout.sampling.seed}};
    j["rollout"] = rollout;
    j["optimizer"] = {{"learning_rate", c.optimizer.learningRate}, {"warmup_steps", c.optimizer.warmupSteps},
        {"weight_decay", c.optimizer.weightDecay}, {"gradient_clip", c.optimizer.gradientClip},
        {"betas", {c.optimizer.beta1, c.optimizer.beta2}}};
    j["batch"] = {{"prompts_per_step", c.batch.promptsPerStep}, {"samples_per_prompt", c.batch.samplesPerPrompt}};
    j["steps"] = c.steps;
    nlohmann::ordered_json evaluation;
    evaluation["every"] = c.evaluation.every;
    if (!c.evaluation.prompts.empty()) {
        evaluation["prompts"] = c.evaluation.prompts;
    }
    evaluation["count"] = c.evaluation.count;
    evaluation["max_tokens"] = c.evaluation.maxTokens;
    evaluation["bf16_unit_every"] = c.evaluation.bf16UnitEvery;
    j["evaluation"] = evaluation;
    j["checkpoint"] = {{"every", c.checkpoint.every}};
    j["seed"] = c.seed;
    j["threads"] = c.threads;
    j["device"] = c.device;
    return j.dump(2);
}

} // namespace mismatch::train
