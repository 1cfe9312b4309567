#include "app/cli/job_options.h"

#include "core/common/error.h"

namespace mismatch::cli {

namespace {

std::string typeName(jobs::ParameterType type)
{
    switch (type) {
    case jobs::ParameterType::Path: return "PATH";
    case jobs::ParameterType::PathList: return "PATH...";
    case jobs::ParameterType::Integer: return "INT";
    case jobs::ParameterType::IntegerList: return "INT...";
    case jobs::ParameterType::Number: return "NUMBER";
    case jobs::ParameterType::NumberList: return "NUMBER...";
    case jobs::ParameterType::ChoiceList: return "CHOICE...";
    case jobs::ParameterType::TextList: return "TEXT"; // CLI11 adds " ..." for a repeatable option
    default: return "TEXT";
    }
}

} // namespace

std::string flagOf(const jobs::JobDefinition& definition, const std::string& parameter)
{
    const jobs::Parameter* p = definition.parameter(parameter);
    return p ? p->longFlag() : parameter;
}

JobOptions::JobOptions(CLI::App* command, const jobs::JobDefinition& definition)
    : definition_(&definition)
{
    for (const jobs::Parameter& p : definition.parameters) {
        std::string help = p.help;
        if (jobs::elementType(p.type) == jobs::ParameterType::Choice) {
            std::string list;
            for (const std::string& choice : p.choices) {
                list += (list.empty() ? "" : "|") + choice;
            }
            if (help.find(list) == std::string::npos && help.find(" | ") == std::string::npos) {
                help += " (" + list + ")";
            }
        }
        CLI::Option* option = nullptr;
        if (p.type == jobs::ParameterType::Flag) {
            option = command->add_flag(p.flag, flags_[p.name], help);
        } else {
            option = command->add_option(p.flag, texts_[p.name], help)->type_name(typeName(p.type));
            if (!jobs::isList(p.type)) {
                // One value, so that a positional after it ("--granularity block128 IN OUT") or a second positional
                // (quantize's IN OUT) takes the next argument.
                option->expected(1)->allow_extra_args(false);
            } else if (p.type == jobs::ParameterType::IntegerList || p.type == jobs::ParameterType::NumberList
                || p.type == jobs::ParameterType::ChoiceList) {
                // "--noise 0.1,0.2" as well as "--noise 0.1 --noise 0.2" (paths and text may hold commas)
                option->delimiter(',');
            }
            if (!p.defaultValue.is_null()) {
                option->default_str(jobs::valueText(p.defaultValue));
            }
        }
        options_[p.name] = option;
    }
    for (const jobs::Parameter& p : definition.parameters) {
        for (const std::string& other : p.excludes) {
            options_.at(p.name)->excludes(options_.at(other));
        }
        for (const std::string& other : p.needs) {
            options_.at(p.name)->needs(options_.at(other));
        }
    }
}

bool JobOptions::anyGiven() const
{
    for (const auto& [name, option] : options_) {
        if (option->count() > 0) {
            return true;
        }
    }
    return false;
}

jobs::JobSpec JobOptions::spec() const
{
    jobs::JobSpec spec(*definition_);
    for (const jobs::Parameter& p : definition_->parameters) {
        const CLI::Option* option = options_.at(p.name);
        if (option->count() == 0) {
            continue;
        }
        if (p.type == jobs::ParameterType::Flag) {
            spec.set(p.name, flags_.at(p.name));
            continue;
        }
        nlohmann::json values = nlohmann::json::array();
        for (const std::string& text : texts_.at(p.name)) {
            std::string error;
            const auto value = jobs::parseValue(p, text, &error);
            if (!value) {
                throw CLI::ValidationError(p.longFlag(), error);
            }
            values.push_back(*value);
        }
        spec.set(p.name, jobs::isList(p.type) ? values : values.at(0));
    }
    const auto word = [this](const std::string& parameter) { return flagOf(*definition_, parameter); };
    const std::vector<jobs::ParameterError> problems = spec.checkParameters();
    if (!problems.empty()) {
        throw CLI::ValidationError(word(problems.front().parameter), problems.front().message);
    }
    const std::vector<jobs::ParameterError> errors = spec.validate();
    if (!errors.empty()) {
        throw InputError(errors.front().parameter.empty() ? definition_->kind : word(errors.front().parameter), "",
            jobs::describeErrors({{"", errors.front().message}}, word));
    }
    return spec;
}

jobs::JobSpec JobOptions::checkedSpec() const
{
    jobs::JobSpec checked = spec();
    const std::vector<jobs::ParameterError> errors = checked.checkInputs();
    if (!errors.empty()) {
        const auto word = [this](const std::string& parameter) { return flagOf(*definition_, parameter); };
        throw InputError(errors.front().parameter.empty() ? definition_->kind : word(errors.front().parameter), "",
            jobs::describeErrors({{"", errors.front().message}}, word));
    }
    return checked;
}

jobs::JobSpec parseJobArguments(const std::vector<std::string>& arguments)
{
    for (const jobs::JobDefinition& definition : jobs::catalogue()) {
        const auto& command = definition.command;
        if (arguments.size() < command.size() || !std::equal(command.begin(), command.end(), arguments.begin())) {
            continue;
        }
        CLI::App app;
        CLI::App* sub = &app;
        for (const std::string& name : command) {
            sub = sub->add_subcommand(name);
        }
        JobOptions options(sub, definition);
        std::vector<std::string> reversed(arguments.rbegin(), arguments.rend());
        try {
            app.parse(reversed);
        } catch (const CLI::ParseError& error) {
            throw InputError("arguments", "", error.what());
        }
        return options.spec();
    }
    throw InputError("arguments", "", "not a job of the catalogue: '" + (arguments.empty() ? "" : arguments[0]) + "'");
}

} // namespace mismatch::cli
