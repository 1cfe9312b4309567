#include "core/jobs/job_spec.h"

#include "core/common/shell_quote.h"

#include <algorithm>
#include <filesystem>

#include "core/common/error.h"
#include "core/common/message_text.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

namespace mismatch::jobs {

std::string toString(ParameterType type)
{
    switch (type) {
    case ParameterType::Text: return "text";
    case ParameterType::Path: return "path";
    case ParameterType::Choice: return "choice";
    case ParameterType::Integer: return "integer";
    case ParameterType::Number: return "number";
    case ParameterType::Flag: return "flag";
    case ParameterType::PathList: return "list of paths";
    case ParameterType::IntegerList: return "list of integers";
    case ParameterType::NumberList: return "list of numbers";
    case ParameterType::ChoiceList: return "list of choices";
    case ParameterType::TextList: return "list of text";
    }
    return "?";
}

bool isList(ParameterType type)
{
    return type == ParameterType::PathList || type == ParameterType::IntegerList || type == ParameterType::NumberList
        || type == ParameterType::ChoiceList || type == ParameterType::TextList;
}

ParameterType elementType(ParameterType type)
{
    switch (type) {
    case ParameterType::PathList: return ParameterType::Path;
    case ParameterType::IntegerList: return ParameterType::Integer;
    case ParameterType::NumberList: return ParameterType::Number;
    case ParameterType::ChoiceList: return ParameterType::Choice;
    case ParameterType::TextList: return ParameterType::Text;
    default: return type;
    }
}

std::string Parameter::longFlag() const
{
    return flag.substr(0, flag.find(','));
}

const Parameter* JobDefinition::parameter(const std::string& name) const
{
    for (const Parameter& p : parameters) {
        if (p.name == name) {
            return &p;
        }
    }
    return nullptr;
}

const JobDefinition* findJob(const std::string& kind)
{
    for (const JobDefinition& definition : catalogue()) {
        if (definition.kind == kind) {
            return &definition;
        }
    }
    return nullptr;
}

namespace {

const JobDefinition& requireJob(const std::string& kind, const std::string& source)
{
    if (const JobDefinition* definition = findJob(kind)) {
        return *definition;
    }
    std::string known;
    for (const JobDefinition& definition : catalogue()) {
        known += (known.empty() ? "" : ", ") + definition.kind;
    }
    throw InputError(source, "job", "unknown job '" + kind + "' (the catalogue has: " + known + ")");
}

// What an Integer parameter holds (JobSpec::integer reads it as int64).
constexpr const char* kWholeNumberRange = "-9223372036854775808 to 9223372036854775807";

// Type, choices and range of one scalar value; "" when it fits.
std::string checkScalar(const Parameter& p, ParameterType type, const nlohmann::json& v)
{
    switch (type) {
    case ParameterType::Text:
    case ParameterType::Path:
        if (!v.is_string()) {
            return "expected text, got " + v.dump();
        }
        // An empty name or path is never meant (`--name ''`, `-p ''`): it would name a run "" or read "<input>".
        return v.get<std::string>().empty() ? std::string("expected a non-empty value, got ''") : std::string();
    case ParameterType::Choice: {
        if (!v.is_string()) {
            return "expected one of the choices, got " + v.dump();
        }
        for (const std::string& choice : p.choices) {
            if (choice == v.get<std::string>()) {
                return "";
            }
        }
        if (p.whyNotAChoice) {
            return p.whyNotAChoice(v.get<std::string>());
        }
        std::string list;
        for (const std::string& choice : p.choices) {
            list += (list.empty() ? "" : ", ") + choice;
        }
        return "expected one of " + list + ", got '" + v.get<std::string>() + "'";
    }
    case ParameterType::Flag:
        return v.is_boolean() ? "" : "expected true or false, got " + v.dump();
    case ParameterType::Integer:
    case ParameterType::Number: {
        if (type == ParameterType::Integer ? !v.is_number_integer() : !v.is_number()) {
            return std::string("expected ") + (type == ParameterType::Integer ? "a whole number" : "a number") + ", got "
                + v.dump();
        }
        if (type == ParameterType::Integer && v.is_number_unsigned()
            && v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
            // A JSON spec's 9223372036854775808 would read back as a negative id.
            return "must be a whole number from " + std::string(kWholeNumberRange) + ", got " + v.dump();
        }
        const double x = v.get<double>();
        if (!std::isfinite(x)) {
            return "expected a finite number, got " + v.dump();
        }
        if (p.low && (p.lowExclusive ? x <= *p.low : x < *p.low)) {
            return std::string("must be ") + (p.lowExclusive ? "> " : ">= ") + numberText(*p.low) + ", got " + v.dump();
        }
        if (p.high && x > *p.high) {
            return "must be <= " + numberText(*p.high) + ", got " + v.dump() + (p.highReason.empty() ? "" : ": ")
                + p.highReason;
        }
        return "";
    }
    default:
        return "";
    }
}

} // namespace

JobSpec::JobSpec(const std::string& kind)
    : definition_(&requireJob(kind, "job"))
{
}

JobSpec::JobSpec(const JobDefinition& definition)
    : definition_(&definition)
{
}

const std::string& JobSpec::kind() const
{
    return definition_->kind;
}

JobSpec& JobSpec::set(const std::string& name, nlohmann::json value)
{
    const Parameter* p = definition_->parameter(name);
    if (!p) {
        throw InputError(kind(), name, "the job has no such parameter");
    }
    // An empty list is no list (the command line cannot write one).
    if (value.is_null() || (value.is_array() && value.empty() && p->defaultValue.is_null())) {
        values_.erase(name);
    } else {
        values_[name] = std::move(value);
    }
    return *this;
}

JobSpec& JobSpec::unset(const std::string& name)
{
    values_.erase(name);
    return *this;
}

nlohmann::json JobSpec::value(const std::string& name) const
{
    const Parameter* p = definition_->parameter(name);
    if (!p) {
        throw InputError(kind(), name, "the job has no such parameter");
    }
    const auto found = values_.find(name);
    return found != values_.end() ? *found : p->defaultValue;
}

bool JobSpec::given(const std::string& name) const
{
    return !value(name).is_null();
}

std::string JobSpec::text(const std::string& name) const
{
    const nlohmann::json v = value(name);
    return v.is_string() ? v.get<std::string>() : std::string();
}

std::int64_t JobSpec::integer(const std::string& name) const
{
    const nlohmann::json v = value(name);
    return v.is_number() ? v.get<std::int64_t>() : 0;
}

double JobSpec::number(const std::string& name) const
{
    const nlohmann::json v = value(name);
    return v.is_number() ? v.get<double>() : 0.0;
}

bool JobSpec::flag(const std::string& name) const
{
    const nlohmann::json v = value(name);
    return v.is_boolean() && v.get<bool>();
}

std::vector<std::string> JobSpec::strings(const std::string& name) const
{
    const nlohmann::json v = value(name);
    return v.is_array() ? v.get<std::vector<std::string>>() : std::vector<std::string> {};
}

std::vector<std::int64_t> JobSpec::integers(const std::string& name) const
{
    const nlohmann::json v = value(name);
    return v.is_array() ? v.get<std::vector<std::int64_t>>() : std::vector<std::int64_t> {};
}

std::vector<double> JobSpec::numbers(const std::string& name) const
{
    const nlohmann::json v = value(name);
    return v.is_array() ? v.get<std::vector<double>>() : std::vector<double> {};
}

std::vector<ParameterError> JobSpec::validate() const
{
    std::vector<ParameterError> errors = checkParameters();
    if (errors.empty() && definition_->check) {
        errors = definition_->check(*this);
    }
    return errors;
}

std::vector<ParameterError> JobSpec::checkParameters() const
{
    std::vector<ParameterError> errors;
    for (const Parameter& p : definition_->parameters) {
        const nlohmann::json v = value(p.name);
        if (v.is_null()) {
            if (p.required) {
                errors.push_back({p.name, "required"});
            }
            continue;
        }
        if (isList(p.type)) {
            if (!v.is_array()) {
                errors.push_back({p.name, "expected a list, got " + v.dump()});
                continue;
            }
            if (p.required && v.empty()) {
                errors.push_back({p.name, "required (at least one)"});
            }
            for (const nlohmann::json& element : v) {
                const std::string problem = checkScalar(p, elementType(p.type), element);
                if (!problem.empty()) {
                    errors.push_back({p.name, problem});
                    break;
                }
            }
            continue;
        }
        const std::string problem = checkScalar(p, p.type, v);
        if (!problem.empty()) {
            errors.push_back({p.name, problem});
        }
    }
    // Excludes / needs look at what was set (a default is not "given" by the user).
    for (const Parameter& p : definition_->parameters) {
        if (!values_.contains(p.name)) {
            continue;
        }
        for (const std::string& other : p.excludes) {
            if (values_.contains(other)) {
                errors.push_back({p.name, "cannot be given together with '" + other + "'"});
            }
        }
        for (const std::string& other : p.needs) {
            if (!given(other)) {
                errors.push_back({p.name, "needs '" + other + "'"});
            }
        }
    }
    return errors;
}

std::vector<ParameterError> JobSpec::checkInputs() const
{
    if (!definition_->checkInputs || !validate().empty()) {
        return {};
    }
    return definition_->checkInputs(*this);
}

void JobSpec::requireValid(const std::string& source) const
{
    std::vector<ParameterError> errors = validate();
    if (errors.empty()) {
        errors = checkInputs();
    }
    if (!errors.empty()) {
        throw InputError(source, errors.front().parameter, errors.front().message);
    }
}

nlohmann::json JobSpec::toJson() const
{
    nlohmann::json parameters = nlohmann::json::object();
    for (const Parameter& p : definition_->parameters) {
        const nlohmann::json v = value(p.name);
        if (!v.is_null() && v != p.defaultValue) {
            parameters[p.name] = v;
        }
    }
    return {{"job", kind()}, {"parameters", parameters}};
}

JobSpec JobSpec::fromJson(const nlohmann::json& json, const std::string& source)
{
    if (!json.is_object() || !json.contains("job") || !json.at("job").is_string()) {
        throw InputError(source, "job", "expected an object {\"job\": KIND, \"parameters\": {...}}");
    }
    JobSpec spec(requireJob(json.at("job").get<std::string>(), source));
    if (json.contains("parameters")) {
        const nlohmann::json& parameters = json.at("parameters");
        if (!parameters.is_object()) {
            throw InputError(source, "parameters", "expected an object of parameter values");
        }
        for (const auto& [name, value] : parameters.items()) {
            if (!spec.definition().parameter(name)) {
                throw InputError(source, name, "the job '" + spec.kind() + "' has no such parameter");
            }
            spec.set(name, value);
        }
    }
    return spec;
}

std::vector<std::string> JobSpec::toArguments() const
{
    std::vector<std::string> arguments = definition_->command;
    std::vector<std::string> options;
    for (const Parameter& p : definition_->parameters) {
        const nlohmann::json v = value(p.name);
        if (v.is_null() || v == p.defaultValue) {
            continue;
        }
        if (p.positional()) {
            if (v.is_array()) {
                for (const nlohmann::json& element : v) {
                    arguments.push_back(valueText(element));
                }
            } else {
                arguments.push_back(valueText(v));
            }
            continue;
        }
        if (p.type == ParameterType::Flag) {
            if (v.get<bool>()) {
                options.push_back(p.longFlag());
            }
            continue;
        }
        if (v.is_array()) {
            // Repeated flags: paths may hold commas.
            for (const nlohmann::json& element : v) {
                options.push_back(p.longFlag());
                options.push_back(valueText(element));
            }
            continue;
        }
        options.push_back(p.longFlag());
        options.push_back(valueText(v));
    }
    arguments.insert(arguments.end(), options.begin(), options.end());
    return arguments;
}

JobResult JobSpec::run(
    store::RunStore& store, Progress& progress, const std::function<void(std::int64_t)>& onRunStarted) const
{
    requireValid(kind());
    // The job's own run keeps the request; forgotten again however the job ends.
    struct Expectation {
        store::RunStore& store;
        ~Expectation() { store.expectJob({}, {}); }
    } expectation {store};
    expectJobRun(store, *this);
    return definition_->run(store, *this, progress, onRunStarted);
}

JobSpec withAbsolutePaths(JobSpec spec)
{
    const auto absolute = [](const std::string& path) {
        return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
    };
    for (const Parameter& p : spec.definition().parameters) {
        if (!spec.given(p.name)) {
            continue;
        }
        if (p.type == ParameterType::Path && !spec.text(p.name).empty()) {
            spec.set(p.name, absolute(spec.text(p.name)));
        } else if (p.type == ParameterType::PathList) {
            nlohmann::json paths = nlohmann::json::array();
            for (const std::string& path : spec.strings(p.name)) {
                paths.push_back(absolute(path));
            }
            spec.set(p.name, paths);
        }
    }
    return spec;
}

void expectJobRun(store::RunStore& store, const JobSpec& spec)
{
    if (spec.definition().runKind.empty()) {
        return;
    }
    // A relative path means the folder the job ran in: stored absolute, the request reads the same anywhere.
    const JobDefinition& job = spec.definition();
    store.expectJob(job.runKindOf ? job.runKindOf(spec) : job.runKind, withAbsolutePaths(spec).toJson().dump());
}

std::optional<JobSpec> JobSpec::ofRun(const store::RunInfo& run)
{
    if (run.jobJson.empty()) {
        return std::nullopt;
    }
    const std::string source = "run " + std::to_string(run.id);
    nlohmann::json json;
    try {
        json = nlohmann::json::parse(run.jobJson);
    } catch (const nlohmann::json::exception& error) {
        throw InputError(source, "job_json", "not JSON: " + jsonErrorDetail(error));
    }
    return fromJson(json, source);
}

bool JobSpec::operator==(const JobSpec& other) const
{
    if (definition_ != other.definition_) {
        return false;
    }
    for (const Parameter& p : definition_->parameters) {
        if (value(p.name) != other.value(p.name)) {
            return false;
        }
    }
    return true;
}

std::string commandLine(const std::vector<std::string>& arguments)
{
    std::string line = "mismatch";
    for (const std::string& argument : arguments) {
        line += " " + shellQuote(argument);
    }
    return line;
}

std::optional<nlohmann::json> parseValue(const Parameter& parameter, const std::string& text, std::string* error)
{
    const ParameterType type = elementType(parameter.type);
    const auto fail = [&](const std::string& expected) -> std::optional<nlohmann::json> {
        if (error) {
            *error = "expected " + expected + ", got '" + text + "'";
        }
        return std::nullopt;
    };
    switch (type) {
    case ParameterType::Integer: {
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || end != text.c_str() + text.size()) {
            return fail("a whole number");
        }
        if (errno == ERANGE) { // strtoll saturates: the digits would quietly mean another number
            return fail("a whole number from " + std::string(kWholeNumberRange));
        }
        return nlohmann::json(static_cast<std::int64_t>(value));
    }
    case ParameterType::Number: {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value)) {
            return fail("a finite number");
        }
        return nlohmann::json(value);
    }
    case ParameterType::Flag:
        if (text == "true") {
            return nlohmann::json(true);
        }
        if (text == "false") {
            return nlohmann::json(false);
        }
        return fail("true or false");
    default:
        return nlohmann::json(text);
    }
}

std::string valueText(const nlohmann::json& value)
{
    if (value.is_string()) {
        return value.get<std::string>();
    }
    if (value.is_number_float()) {
        return numberText(value.get<double>());
    }
    if (value.is_array()) {
        std::string text;
        for (const nlohmann::json& element : value) {
            text += (text.empty() ? "" : ",") + valueText(element);
        }
        return text;
    }
    return value.dump();
}

std::string describeErrors(
    const std::vector<ParameterError>& errors, const std::function<std::string(const std::string& parameter)>& name)
{
    std::string text;
    for (const ParameterError& error : errors) {
        std::string message = error.message;
        // Other parameters quoted in the message ('scan') are named in the front-end's words too.
        for (std::size_t open = message.find('\''); open != std::string::npos; open = message.find('\'', open + 1)) {
            const std::size_t close = message.find('\'', open + 1);
            if (close == std::string::npos) {
                break;
            }
            const std::string quoted = message.substr(open + 1, close - open - 1);
            const std::string word = name(quoted);
            if (!word.empty() && word != quoted) {
                message.replace(open + 1, quoted.size(), word);
                open += word.size() + 1;
            } else {
                open = close;
            }
        }
        text += (text.empty() ? "" : "\n") + (error.parameter.empty() ? message : name(error.parameter) + ": " + message);
    }
    return text;
}

} // namespace mismatch::jobs
