#include "core/jobs/job_file.h"

#include "core/common/file_io.h"

#include "core/analysis/rollout_measure.h"
#include "core/common/error.h"
#include "core/common/input_limits.h"
#include "core/common/output_check.h"
#include "core/io/recipe_export.h"
#include "core/common/yaml_mapping.h"
#include "core/common/yaml_scalar.h"

#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <set>
#include <sstream>

namespace fs = std::filesystem;

namespace mismatch::jobs {

namespace {

std::string place(int line, int column)
{
    return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// Whether a parameter names what the job writes: `out` / `output`, or a path labelled "Output ..." (zoo shape's
// DIR).
bool isOutputParameter(const Parameter& p)
{
    return (p.type == ParameterType::Path)
        && (p.name == "out" || p.name == "output" || p.label.rfind("Output", 0) == 0);
}

// Issue 46: a step (or the one job) whose output is the job file itself would destroy the file being run.
// `resolvedOnly`: check only the parameters that had references (the others were checked before the first step).
void requireOutputsAreNotTheFile(const JobFile& file, const JobFileStep& step, const JobSpec& spec, bool resolvedOnly)
{
    for (const Parameter& p : spec.definition().parameters) {
        if (!isOutputParameter(p) || !spec.given(p.name) || (resolvedOnly && !step.references.count(p.name))) {
            continue;
        }
        try {
            requireOutputNotInput(spec.text(p.name), {{file.path, file.study ? "study file" : "job file"}});
        } catch (const InputError& error) {
            const auto found = step.places.find(p.name);
            const std::string where = found == step.places.end()
                ? place(step.line, step.column)
                : place(found->second.first, found->second.second);
            throw InputError(file.path, where,
                (step.id.empty() ? "" : "step '" + step.id + "': ") + "parameter '" + p.name + "': "
                    + spec.text(p.name) + ": " + error.detail());
        }
    }
}

std::string place(const YAML::Node& node)
{
    const io::YamlPosition where = io::yamlPosition(node);
    return place(where.line, where.column);
}

bool isReferenceText(const std::string& text)
{
    return text.find("${") != std::string::npos;
}

bool isPath(ParameterType type)
{
    return type == ParameterType::Path || type == ParameterType::PathList;
}

// A relative path of the file made relative to the file's folder.
std::string resolvePath(const std::string& path, const std::string& file)
{
    if (path.empty() || fs::path(path).is_absolute()) {
        return path;
    }
    return (fs::absolute(file).parent_path() / path).lexically_normal().string();
}

nlohmann::json resolvePaths(const Parameter& p, nlohmann::json value, const std::string& file)
{
    if (!isPath(p.type)) {
        return value;
    }
    if (value.is_string()) {
        return resolvePath(value.get<std::string>(), file);
    }
    if (value.is_array()) {
        for (nlohmann::json& element : value) {
            if (element.is_string()) {
                element = resolvePath(element.get<std::string>(), file);
            }
        }
    }
    return value;
}

// One scalar node as a value of the parameter's (element) type.
nlohmann::json scalarValue(const Parameter& p, const YAML::Node& node, const std::string& file)
{
    if (!node.IsScalar()) {
        throw InputError(file, place(node), "parameter '" + p.name + "': expected " + toString(p.type) + ", got "
                + io::kindName(node));
    }
    std::string error;
    const auto value = parseValue(p, node.Scalar(), &error);
    if (!value) {
        throw InputError(file, place(node), "parameter '" + p.name + "': " + error);
    }
    return *value;
}

const std::set<std::string> kStepKeys = {"job", "id"};

// The located-YAML reader (core/common/yaml_mapping.h) with its problems as the job file's InputErrors.
io::YamlMappingReader yamlReader(const std::string& file)
{
    return io::YamlMappingReader([file](const io::SourceLocation& where, const std::string& detail) {
        throw InputError(file, io::lineColumn(where), detail);
    });
}

JobFileStep parseStep(const YAML::Node& node, const std::string& file, bool study)
{
    if (!node.IsMap()) {
        throw InputError(file, place(node), "expected a mapping with 'job:' and the job's parameters, got "
                + io::kindName(node));
    }
    const YAML::Node kind = node["job"];
    if (!kind || !kind.IsScalar()) {
        throw InputError(file, place(node), "missing 'job:' (the job's kind, one of `mismatch run --help`)");
    }
    const JobDefinition* definition = findJob(kind.Scalar());
    if (!definition) {
        std::string known;
        for (const JobDefinition& job : catalogue()) {
            known += (known.empty() ? "" : ", ") + job.kind;
        }
        throw InputError(file, place(kind), "unknown job '" + kind.Scalar() + "' (the catalogue has: " + known + ")");
    }
    JobFileStep step {"", JobSpec(*definition), 0, 0, {}, {}};
    const io::YamlPosition start = io::yamlPosition(node);
    step.line = start.line;
    step.column = start.column;
    if (study) {
        const YAML::Node id = node["id"];
        if (!id || !id.IsScalar() || id.Scalar().empty()
            || id.Scalar().find_first_not_of(
                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
                != std::string::npos) {
            throw InputError(file, id ? place(id) : place(node),
                "a study step needs 'id:' (letters, digits, '_' and '-'), which later steps use in ${ID.FIELD}");
        }
        step.id = id.Scalar();
    }
    // Keys: the job's own message for one it does not have, then the located reader's checks (a key that is not
    // a name, a key given twice: a repeated parameter would otherwise silently take its last value).
    std::vector<std::string> allowed(kStepKeys.begin(), kStepKeys.end());
    for (const Parameter& parameter : definition->parameters) {
        allowed.push_back(parameter.name);
    }
    for (const auto& entry : node) {
        const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : std::string();
        if (key == "id" && !study) {
            throw InputError(file, place(entry.first), "'id' belongs to a study's steps (a file with 'steps:')");
        }
        if (!key.empty() && kStepKeys.count(key) == 0 && !definition->parameter(key)) {
            throw InputError(file, place(entry.first),
                "job '" + definition->kind + "' has no parameter '" + key + "' (see `mismatch run --help`)");
        }
    }
    for (const io::YamlEntry& entry : yamlReader(file).entries(node, {"", start.line, start.column}, allowed)) {
        const std::string& key = entry.key;
        if (kStepKeys.count(key) > 0) {
            continue;
        }
        const Parameter* p = definition->parameter(key);
        const YAML::Node& value = entry.value;
        const io::YamlPosition where = io::yamlPosition(value);
        step.places[key] = {where.line, where.column};
        if (value.IsScalar() && isReferenceText(value.Scalar())) {
            step.references[key] = value.Scalar();
            continue;
        }
        if (value.IsNull()) {
            continue; // "key:" with nothing: the default
        }
        if (isList(p->type)) {
            nlohmann::json list = nlohmann::json::array();
            if (value.IsSequence()) {
                for (const YAML::Node& element : value) {
                    list.push_back(scalarValue(*p, element, file));
                }
            } else {
                list.push_back(scalarValue(*p, value, file)); // one item
            }
            step.spec.set(key, resolvePaths(*p, list, file));
        } else {
            step.spec.set(key, resolvePaths(*p, scalarValue(*p, value, file), file));
        }
    }
    return step;
}

// The value at `path` ("scan_id", "decisions.0.decision") of a result; nullptr when there is none.
const nlohmann::json* field(const nlohmann::json& result, const std::string& path)
{
    const nlohmann::json* at = &result;
    std::stringstream parts(path);
    std::string part;
    while (std::getline(parts, part, '.')) {
        if (at->is_object() && at->contains(part)) {
            at = &(*at)[part];
        } else if (at->is_array() && io::isDigits(part) && std::stoull(part) < at->size()) {
            at = &(*at)[std::stoull(part)];
        } else {
            return nullptr;
        }
    }
    return at;
}

} // namespace

JobFile parseJobFile(const std::string& text, const std::string& path)
{
    const YAML::Node root = io::loadYaml(text, path);
    JobFile file;
    file.path = path;
    if (!root.IsMap()) {
        throw InputError(path, place(root), "expected a job (a mapping with 'job:') or a study (a mapping with "
                                            "'steps:'), got " + io::kindName(root));
    }
    if (const YAML::Node steps = root["steps"]) {
        file.study = true;
        if (!steps.IsSequence() || steps.size() == 0) {
            throw InputError(path, place(steps), "'steps' must be a non-empty list of jobs");
        }
        for (const auto& entry : root) {
            if (!entry.first.IsScalar() || entry.first.Scalar() != "steps") {
                throw InputError(path, place(entry.first), "unknown key '" + entry.first.Scalar()
                        + "' in a study file (it holds 'steps:')");
            }
        }
        const io::YamlPosition start = io::yamlPosition(root);
        yamlReader(path).entries(root, {"", start.line, start.column}, {"steps"}); // 'steps' given twice
        std::set<std::string> ids;
        for (const YAML::Node& node : steps) {
            JobFileStep step = parseStep(node, path, true);
            if (!ids.insert(step.id).second) {
                throw InputError(path, place(node["id"]), "step id '" + step.id + "' is used twice");
            }
            // A reference may only name an earlier step.
            for (const auto& [name, reference] : step.references) {
                for (std::size_t open = reference.find("${"); open != std::string::npos;
                     open = reference.find("${", open + 2)) {
                    const std::size_t close = reference.find('}', open);
                    const std::string target = reference.substr(open + 2,
                        close == std::string::npos ? std::string::npos : close - open - 2);
                    const std::string stepId = target.substr(0, target.find('.'));
                    if (close == std::string::npos || target.find('.') == std::string::npos
                        || ids.count(stepId) == 0 || stepId == step.id) {
                        const auto [line, column] = step.places.at(name);
                        throw InputError(path, place(line, column),
                            "parameter '" + name + "': '" + reference
                                + "' must refer to the result of an earlier step as ${ID.FIELD}");
                    }
                }
            }
            file.steps.push_back(std::move(step));
        }
        return file;
    }
    JobFileStep step = parseStep(root, path, false);
    if (!step.references.empty()) {
        const auto& [name, reference] = *step.references.begin();
        const auto [line, column] = step.places.at(name);
        throw InputError(path, place(line, column),
            "parameter '" + name + "': '" + reference + "' refers to a step, but this file is one job (a study "
                                                         "file lists 'steps:')");
    }
    file.steps.push_back(std::move(step));
    return file;
}

JobFile loadJobFile(const std::string& path)
{
    return parseJobFile(readInputFile(path, limits::kConfigFile, "job file"), path);
}

std::string jobFileText(const JobSpec& spec)
{
    YAML::Emitter out;
    out << YAML::BeginMap << YAML::Key << "job" << YAML::Value << spec.kind();
    const nlohmann::json parameters = spec.toJson().at("parameters");
    for (const Parameter& p : spec.definition().parameters) {
        if (!parameters.contains(p.name)) {
            continue;
        }
        const nlohmann::json& value = parameters.at(p.name);
        out << YAML::Key << p.name << YAML::Value;
        if (value.is_array()) {
            out << YAML::Flow << YAML::BeginSeq;
            for (const nlohmann::json& element : value) {
                out << YAML::DoubleQuoted << valueText(element);
            }
            out << YAML::EndSeq;
        } else if (value.is_string()) {
            out << YAML::DoubleQuoted << value.get<std::string>();
        } else {
            out << valueText(value);
        }
    }
    out << YAML::EndMap;
    return std::string(out.c_str()) + "\n";
}

void requireJobFileIsNoPathOf(const std::string& path, const JobSpec& spec)
{
    std::vector<NamedInput> named;
    std::vector<std::string> models;
    for (const Parameter& p : spec.definition().parameters) {
        if (!isPath(p.type) || !spec.isSet(p.name)) {
            continue;
        }
        const std::vector<std::string> values
            = p.type == ParameterType::PathList ? spec.strings(p.name) : std::vector<std::string> {spec.text(p.name)};
        for (const std::string& value : values) {
            if (value.empty() || isReferenceText(value)) {
                continue; // a study step's ${...}: known when the step runs
            }
            const std::string resolved = resolvePath(value, path); // as the job file will be read
            named.push_back({resolved, "'" + p.name + "' of the " + spec.kind() + " job"});
            std::error_code error;
            if (fs::is_regular_file(fs::path(resolved) / "config.json", error)) {
                models.push_back(resolved);
            }
        }
    }
    requireOutputNotInput(path, named, models, "job file");
}

void writeJobFile(const std::string& path, const JobSpec& spec)
{
    requireJobFileIsNoPathOf(path, spec);
    writeFileAtomically(path, jobFileText(spec));
}

void writeJobFileText(const std::string& path, const std::string& text)
{
    for (const JobFileStep& step : parseJobFile(text, path).steps) {
        requireJobFileIsNoPathOf(path, step.spec);
    }
    writeFileAtomically(path, text);
}

JobSpec resolveStep(const JobFile& file, const JobFileStep& step, const std::map<std::string, JobResult>& results)
{
    JobSpec spec = step.spec;
    const auto where = [&](const std::string& name) {
        const auto found = step.places.find(name);
        return found == step.places.end() ? place(step.line, step.column)
                                          : place(found->second.first, found->second.second);
    };
    for (const auto& reference : step.references) {
        // Named references, not a structured binding: C++17 lets no lambda capture a binding (clang refuses it).
        const std::string& name = reference.first;
        const std::string& text = reference.second;
        const Parameter& p = *spec.definition().parameter(name);
        const auto lookUp = [&](const std::string& target) -> const nlohmann::json& {
            const std::size_t dot = target.find('.');
            const auto result = results.find(target.substr(0, dot));
            const nlohmann::json* value
                = result == results.end() ? nullptr : field(result->second, target.substr(dot + 1));
            if (!value) {
                throw InputError(file.path, where(name),
                    "parameter '" + name + "': ${" + target + "}: the result of step '" + target.substr(0, dot)
                        + "' has no field '" + target.substr(dot + 1) + "'");
            }
            return *value;
        };
        nlohmann::json value;
        const std::size_t close = text.find('}');
        if (text.rfind("${", 0) == 0 && close == text.size() - 1) {
            value = lookUp(text.substr(2, close - 2)); // the whole value: keeps its type
            if (isList(p.type) && !value.is_array()) {
                value = nlohmann::json::array({value}); // one item
            }
            if (value.is_string()) {
                std::string error;
                const auto parsed = parseValue(p, value.get<std::string>(), &error);
                if (!parsed) {
                    throw InputError(file.path, where(name), "parameter '" + name + "': " + error);
                }
                value = *parsed;
            }
        } else {
            std::string out;
            std::size_t at = 0;
            for (std::size_t open = text.find("${"); open != std::string::npos; open = text.find("${", at)) {
                const std::size_t end = text.find('}', open);
                out += text.substr(at, open - at) + valueText(lookUp(text.substr(open + 2, end - open - 2)));
                at = end + 1;
            }
            out += text.substr(at);
            std::string error;
            const auto parsed = parseValue(p, out, &error);
            if (!parsed) {
                throw InputError(file.path, where(name), "parameter '" + name + "': " + error);
            }
            value = isList(p.type) ? nlohmann::json::array({*parsed}) : *parsed;
        }
        spec.set(name, resolvePaths(p, value, file.path));
    }
    requireOutputsAreNotTheFile(file, step, spec, true);
    std::vector<ParameterError> errors = spec.validate();
    if (errors.empty()) {
        errors = spec.checkInputs(); // the job's checks of its input files (a calibration's run file, say)
    }
    if (!errors.empty()) {
        const ParameterError& error = errors.front();
        const std::string stepName = step.id.empty() ? "" : "step '" + step.id + "': ";
        throw InputError(file.path, where(error.parameter),
            stepName + (error.parameter.empty() ? "" : "parameter '" + error.parameter + "': ") + error.message);
    }
    return spec;
}

std::vector<JobResult> runJobFile(const JobFile& file, store::RunStore& store, Progress& progress,
    const std::function<void(std::size_t, const JobSpec&)>& onStep,
    const std::function<void(std::size_t, const JobResult&)>& onResult)
{
    // Before the first step runs: no step's plain output path may be the file itself.
    for (const JobFileStep& step : file.steps) {
        requireOutputsAreNotTheFile(file, step, step.spec, false);
    }
    std::map<std::string, JobResult> byId;
    std::vector<JobResult> results;
    const double share = 1.0 / static_cast<double>(file.steps.size());
    for (std::size_t i = 0; i < file.steps.size(); ++i) {
        const JobFileStep& step = file.steps[i];
        const JobSpec spec = resolveStep(file, step, byId);
        if (onStep) {
            onStep(i, spec);
        }
        const std::string label = step.id.empty() ? spec.kind() : step.id + " (" + spec.kind() + ")";
        Progress slice = progress.child(share * static_cast<double>(i), share * static_cast<double>(i + 1),
            file.study ? label : std::string());
        JobResult result;
        try {
            result = spec.run(store, slice);
        } catch (const CancelledError&) {
            throw;
        } catch (const InputError& error) {
            if (!file.study) {
                throw;
            }
            throw InputError(file.path, place(step.line, step.column), "step '" + step.id + "': " + error.what());
        } catch (const ResourceError& error) {
            if (!file.study) {
                throw;
            }
            throw ResourceError(file.path + ":" + place(step.line, step.column) + ": step '" + step.id + "': "
                + error.what());
        } catch (const Error& error) {
            if (!file.study) {
                throw;
            }
            throw Error(file.path + ":" + place(step.line, step.column) + ": step '" + step.id + "': " + error.what());
        }
        if (onResult) {
            onResult(i, result);
        }
        if (!step.id.empty()) {
            byId[step.id] = result;
        }
        results.push_back(std::move(result));
    }
    return results;
}

} // namespace mismatch::jobs
