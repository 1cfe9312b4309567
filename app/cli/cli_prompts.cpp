// mismatch prompts generate arith (--split S [--count N] [--seed S] --out FILE | --all --out-dir DIR)
// mismatch prompts check FILE [--template T] [--task arith]
#include "app/cli/context.h"
#include "core/common/error.h"
#include "core/io/arith_task.h"
#include "core/io/prompt_set.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>

namespace fs = std::filesystem;

namespace mismatch::cli {

namespace {

struct GenerateArithArguments {
    std::string split;
    std::optional<int> count;
    std::optional<std::uint64_t> seed;
    std::string out;
    bool all = false;
    std::string outDirectory;
};

struct CheckArguments {
    std::string file;
    std::string promptTemplate;
    std::string task;
};

struct WrittenSet {
    std::string path;
    std::string split;
    std::uint64_t seed = 0;
    int count = 0;
};

WrittenSet writeArithSplit(io::ArithSplit split, int count, std::uint64_t seed, const std::string& path)
{
    io::PromptSet set;
    set.name = fs::path(path).stem().string();
    set.prompts = io::generateArithSplit(split, count, seed);
    io::writePromptSet(set, path);
    return {path, io::toString(split), seed, count};
}

void reportWritten(const Context& context, const std::vector<WrittenSet>& written)
{
    if (context.json) {
        nlohmann::json files = nlohmann::json::array();
        for (const WrittenSet& w : written) {
            files.push_back({{"path", w.path}, {"split", w.split}, {"seed", w.seed}, {"count", w.count}});
        }
        context.printJson({{"task", "arith"}, {"files", files}});
        return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const WrittenSet& w : written) {
        rows.push_back({w.split, std::to_string(w.count), std::to_string(w.seed), w.path});
    }
    *context.out << formatTable({"split", "problems", "seed", "path"}, rows);
}

void runGenerateArith(const Context& context, const GenerateArithArguments& arguments)
{
    std::vector<WrittenSet> written;
    if (arguments.all) {
        const fs::path directory(arguments.outDirectory);
        std::error_code error;
        fs::create_directories(directory, error);
        if (error) {
            throw InputError(arguments.outDirectory, "", "cannot create the directory: " + error.message());
        }
        for (const io::ArithSplit split : {io::ArithSplit::Train, io::ArithSplit::Heldout, io::ArithSplit::Probe}) {
            const fs::path path = directory / ("arith-" + io::toString(split) + ".jsonl");
            written.push_back(
                writeArithSplit(split, io::defaultArithCount(split), io::defaultArithSeed(split), path.string()));
        }
    } else {
        const std::optional<io::ArithSplit> split = io::parseArithSplit(arguments.split);
        if (!split) {
            throw InputError("--split", "", "unknown split \"" + arguments.split + "\" (train, heldout or probe)");
        }
        written.push_back(writeArithSplit(*split, arguments.count.value_or(io::defaultArithCount(*split)),
            arguments.seed.value_or(io::defaultArithSeed(*split)), arguments.out));
    }
    reportWritten(context, written);
}

// Every prompt's answer is the final value of its reference worked solution; returns the longest
// prompt + solution in characters.
size_t checkArithSet(const io::PromptSet& set)
{
    size_t longest = 0;
    for (const io::Prompt& prompt : set.prompts) {
        const std::string solution = io::solveArith(prompt.prompt);
        const std::optional<std::string> answer = io::extractAnswer(solution);
        if (!answer || *answer != prompt.answer) {
            throw InputError(set.path, "prompt \"" + prompt.id + "\"",
                "answer \"" + prompt.answer + "\" but the worked solution gives \"" + answer.value_or("") + "\"");
        }
        longest = std::max(longest, prompt.prompt.size() + solution.size());
    }
    return longest;
}

void checkPrompts(const Context& context, const CheckArguments& arguments)
{
    io::PromptSet set = io::loadPromptSet(arguments.file);
    if (!arguments.promptTemplate.empty()) {
        io::validatePromptTemplate(arguments.promptTemplate, "--template");
        set.promptTemplate = arguments.promptTemplate;
    }
    std::optional<size_t> longestArith;
    if (arguments.task == "arith") {
        longestArith = checkArithSet(set);
    }
    size_t longestPrompt = 0;
    for (const io::Prompt& prompt : set.prompts) {
        longestPrompt = std::max(longestPrompt, io::renderPrompt(set, prompt).size());
    }
    if (context.json) {
        nlohmann::json result = {{"path", set.path}, {"name", set.name}, {"prompts", set.prompts.size()},
            {"prompt_template", set.promptTemplate}, {"longest_prompt_chars", longestPrompt}};
        if (longestArith) {
            result["task"] = arguments.task;
            result["longest_prompt_and_solution_chars"] = *longestArith;
        }
        context.printJson(result);
        return;
    }
    *context.out << set.path << ": " << set.prompts.size() << " prompts, valid\n";
    if (set.promptTemplate != io::kIdentityPromptTemplate) {
        *context.out << "prompt template: " << nlohmann::json(set.promptTemplate).dump() << "\n";
    }
    *context.out << "longest prompt: " << longestPrompt << " characters\n";
    if (longestArith) {
        *context.out << "arith answers match their worked solutions; longest prompt + solution: " << *longestArith
                     << " characters\n";
    }
}

void registerPromptCommands(CLI::App& app, Context& context)
{
    CLI::App* prompts = app.add_subcommand("prompts", "Generate and validate prompt sets (JSON Lines)");
    prompts->require_subcommand(1);

    CLI::App* generate = prompts->add_subcommand("generate", "Generate a built-in task's prompt set");
    generate->require_subcommand(1);

    auto generateArguments = std::make_shared<GenerateArithArguments>();
    CLI::App* arith = generate->add_subcommand("arith",
        "Multi-step integer arithmetic with worked solutions (prompt \"Q:(3+4)*2\\n\", response "
        "\"3+4=7;7*2=14;A:14\\n\"). Splits and their default seeds: heldout 512 problems (seed 101), probe 128 "
        "(seed 202, without held-out problems), train 4096 (seed 303, without held-out and probe problems). "
        "--all writes these three as arith-<split>.jsonl, the files shipped in resources/prompts.");
    CLI::Option* split = arith->add_option("--split", generateArguments->split, "train, heldout or probe")
                             ->check(CLI::IsMember({"train", "heldout", "probe"}));
    CLI::Option* count
        = arith->add_option("--count", generateArguments->count,
                    "Problems to write (default: the split's size; at most 1000000, about 60 MB)")
              ->check(between(1, 1000000));
    CLI::Option* seed = arith->add_option("--seed", generateArguments->seed, "Generator seed (default: the split's)");
    CLI::Option* out = arith->add_option("--out", generateArguments->out, "Output file (.jsonl)")->type_name("FILE");
    CLI::Option* all = arith->add_flag("--all", generateArguments->all, "Write all three splits with their defaults");
    CLI::Option* outDirectory
        = arith->add_option("--out-dir", generateArguments->outDirectory, "Directory for --all")->type_name("DIR");
    all->excludes(split)->excludes(count)->excludes(seed)->excludes(out)->needs(outDirectory);
    outDirectory->needs(all);
    split->needs(out);
    out->needs(split);
    arith->callback([&context, generateArguments] {
        if (!generateArguments->all && generateArguments->split.empty()) {
            throw CLI::RequiredError("--split and --out, or --all and --out-dir");
        }
        runGenerateArith(context, *generateArguments);
    });

    auto checkArguments = std::make_shared<CheckArguments>();
    CLI::App* check = prompts->add_subcommand("check", "Validate a prompt set and print its size");
    check->add_option("file", checkArguments->file, "Prompt set (.jsonl)")->required()->type_name("FILE");
    check->add_option("--template", checkArguments->promptTemplate,
        "Prompt template to validate and use instead of the set's, e.g. \"Question: {prompt}\\nAnswer:\"");
    check->add_option("--task", checkArguments->task, "Also check every answer against the task's reference solution")
        ->check(CLI::IsMember({"arith"}));
    check->callback([&context, checkArguments] { checkPrompts(context, *checkArguments); });
}

const CommandRegistration registration(30, registerPromptCommands);
} // namespace

} // namespace mismatch::cli
