// mismatch export RECIPE --to vllm|sglang|llm-compressor|compressed-tensors|verl|modelopt --model DIR [--out PATH]
//                 [--staleness K] [--vllm-form online|checkpoint] [--rollout vllm|sglang] [--target-version V]
//                 [--kv-probe PROMPTS [--kv-probe-count N] [--tensor-parallel N]]   (--to sglang)
//                 [--teacher PATH --objective NAME [--top-k K] [--correction none|tis|mis [--correction-cap C]]]
//                                                                     (--to verl: on-policy distillation)
#include "app/cli/context.h"
#include "core/analysis/kv_scale_export.h"
#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/io/recipe_export.h"
#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"

#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <utility>
#include <vector>

namespace mismatch::cli {

namespace {

struct ExportCommandOptions {
    std::string recipePath;
    std::string target;
    std::string modelPath; // a model directory or its config.json
    std::string outPath; // empty: stdout
    std::int64_t staleness = 0;
    std::string vllmForm = "online";
    std::string rollout = "vllm";
    std::string targetVersion = "current";
    std::string kvProbe; // --to sglang: prompt set the recipe's FP8 KV scales are calibrated on; empty: none
    std::int64_t kvProbeCount = analysis::kDefaultKvProbeCount;
    std::int64_t tensorParallel = 1;
    CLI::Option* kvProbeCountOption = nullptr;
    CLI::Option* tensorParallelOption = nullptr;
    // --to verl: on-policy distillation from this teacher; empty: the rollout section alone.
    std::string teacher;
    std::string objective; // the run file's spelling: opd_full_kl | opd_k1 | opd_k3 | opd_topk
    std::int64_t topK = 0;
    std::string correction = "none";
    double correctionCap = 2.0;
    CLI::Option* objectiveOption = nullptr;
    CLI::Option* topKOption = nullptr;
    CLI::Option* correctionOption = nullptr;
    CLI::Option* correctionCapOption = nullptr;
};

// --teacher and the options of the loss and correction it goes with: verl's on-policy distillation. The options
// without a teacher, and a teacher without the objective the budget was calibrated with, are refused here; the
// export checks the values (io::VerlDistillation).
std::optional<io::VerlDistillation> distillationOptions(const ExportCommandOptions& options)
{
    const std::vector<std::pair<CLI::Option*, const char*>> parts = {{options.objectiveOption, "--objective"},
        {options.topKOption, "--top-k"}, {options.correctionOption, "--correction"},
        {options.correctionCapOption, "--correction-cap"}};
    if (options.teacher.empty()) {
        for (const auto& [option, name] : parts) {
            if (option->count() > 0) {
                throw InputError(name, "", "needs --teacher: it sets verl's on-policy distillation (--to verl)");
            }
        }
        return std::nullopt;
    }
    if (options.objectiveOption->count() == 0) {
        throw InputError("--teacher", "",
            "needs --objective, the objective the budget was calibrated with (the run file's objective: opd_full_kl, "
            "opd_k1, opd_k3 or opd_topk), which sets verl's distillation loss");
    }
    if (options.correctionCapOption->count() > 0 && options.correction == "none") {
        throw InputError("--correction-cap", "", "needs --correction tis or mis");
    }
    io::VerlDistillation opd;
    opd.teacherPath = options.teacher;
    opd.objective = options.objective;
    opd.topK = options.topK;
    opd.correction = options.correction;
    opd.correctionCap = options.correctionCap;
    return opd;
}

// --out PATH names the config file alone when it ends in .json, .yaml or .yml; any other PATH is a directory.
bool namesConfigFile(const std::string& path)
{
    const std::string extension = std::filesystem::path(path).extension().string();
    return extension == ".json" || extension == ".yaml" || extension == ".yml";
}

// Issue 46: --out (the config file, or each file of the directory) may not be the recipe, the model's config or
// the probe prompts, nor lie inside the model directory read. `files`: the directory's file names (empty before
// the export is built: then --out itself is checked).
void requireOutputIsNoInput(const ExportCommandOptions& options, const std::string& configPath,
    const std::string& modelDirectory, const std::vector<std::string>& files)
{
    io::requireExportIsNoInput(options.outPath, files, {options.recipePath, configPath, modelDirectory, options.kvProbe});
}

// --kv-probe: refuses the probe options where they do not apply (before anything is loaded), then calibrates the
// recipe's FP8 KV scales on the probe prompts (analysis::calibrateExportKvScales) into `exportOptions`, with the
// tensor-parallel size of the scale file.
void probeKvScales(const ExportCommandOptions& options, bool json, const quant::Recipe& recipe,
    const quant::RecipePlan& plan, io::ExportOptions& exportOptions)
{
    const bool countGiven = options.kvProbeCountOption->count() > 0;
    const bool parallelGiven = options.tensorParallelOption->count() > 0;
    const bool probing = !options.kvProbe.empty();
    if (!probing && !countGiven && !parallelGiven) {
        return;
    }
    const std::string given = probing ? "--kv-probe" : countGiven ? "--kv-probe-count" : "--tensor-parallel";
    if (exportOptions.target != io::ExportTarget::Sglang) {
        throw InputError(given, "",
            "applies to --to sglang only (SGLang alone takes calibrated FP8 KV scales outside a checkpoint, as a "
            "--quantization-param-path file; for the other targets calibrate them into a checkpoint with --to "
            "llm-compressor)");
    }
    if (!probing) {
        throw InputError(given, "",
            "needs --kv-probe PROMPTS: it sizes sglang_kv_scales.json, which only a KV-scale probe writes");
    }
    if (!json && (options.outPath.empty() || namesConfigFile(options.outPath))) {
        throw InputError("--kv-probe", "",
            "writes sglang_kv_scales.json beside sglang.json and sglang_launch.sh: give --out DIRECTORY (or "
            "--json, whose `files` carry it)");
    }
    analysis::KvScaleProbe probe;
    probe.promptSet = options.kvProbe;
    probe.count = options.kvProbeCount;
    probe.what = "--kv-probe";
    analysis::requirePerTensorFp8Kv(recipe, plan, probe);
    // What the target refuses in the recipe is refused before the model is loaded and the prompts are run.
    io::exportBundle(recipe, plan, exportOptions);
    const std::string directory = exportOptions.modelPath.empty() ? "." : exportOptions.modelPath;
    exportOptions.kvScales = analysis::calibrateExportKvScales(directory, recipe, probe);
    exportOptions.tensorParallelSize = options.tensorParallel;
}

// verl on-policy distillation: the teacher, the calibrated objective and the run file's correction.
void addDistillationOptions(CLI::App& command, ExportCommandOptions& options)
{
    command
        .add_option("--teacher", options.teacher,
            "verl only: write verl's on-policy distillation with this teacher model (a path or a Hugging Face id, "
            "written as given): verl.yaml and verl_overrides.txt then hold the student (--model), its rollout under "
            "the recipe, the teacher, the distillation loss of --objective and the rollout correction, and "
            "verl_opd.sh the whole python3 -m verl.trainer.main_ppo command. Needs --objective")
        ->type_name("PATH");
    options.objectiveOption
        = command
              .add_option("--objective", options.objective,
                  "With --teacher: the objective the budget was calibrated with, as the run file names it. opd_k1 "
                  "and opd_k3 are verl's loss_mode k1 and k3 as policy-gradient rewards; opd_full_kl has no verl "
                  "loss (k1 is written, with a warning); opd_topk has none either (forward_kl_topk is written, with a "
                  "warning)")
              ->type_name("NAME");
    options.topKOption
        = command
              .add_option("--top-k", options.topK, "With --objective opd_topk: its k (verl's distillation_loss.topk)")
              ->type_name("K")
              ->check(CLI::PositiveNumber);
    options.correctionOption
        = command
              .add_option("--correction", options.correction,
                  "With --teacher: the run file's per-token correction of the mismatch, as verl's "
                  "algorithm.rollout_correction: none (default), tis (rollout_is token, threshold C) or mis "
                  "(rollout_rs token_k1, threshold C: tokens outside [1/C, C] leave the loss)")
              ->check(CLI::IsMember({"none", "tis", "mis"}));
    options.correctionCapOption = command
                                      .add_option("--correction-cap", options.correctionCap,
                                          "With --correction tis or mis: the cap C, above 1 (default 2)")
                                      ->type_name("C");
}

void registerExportCommand(CLI::App& app, Context& context)
{
    auto options = std::make_shared<ExportCommandOptions>();
    CLI::App* command = app.add_subcommand("export",
        "Export a precision recipe, resolved against a model, as the configuration an outside tool reads, and what "
        "a person pastes to run it: vLLM engine arguments (online FP8, MXFP8 or MXFP4 quantization of the BF16 "
        "checkpoint; --vllm-form checkpoint for an FP8 checkpoint's quantization_config, or the compressed-tensors one "
        "of an NVFP4, MXFP4 or MXFP8 checkpoint) with the vllm serve command and the "
        "Python LLM(...) call; SGLang launch arguments and environment; llm-compressor recipe (YAML) with a oneshot "
        "script and the vllm serve command of the checkpoint it saves; compressed-tensors quantization_config (JSON); "
        "verl rollout config (YAML) with Hydra override lines, or with --teacher verl's on-policy distillation "
        "(config, overrides and the whole command); ModelOpt hf_quant_config.json with the config.json fragment. "
        "Modules left in BF16 are listed as ignored; a recipe feature the target cannot express is an error, and "
        "where the target runs something other than the recipe a warning says what. For --to sglang, --kv-probe "
        "PROMPTS calibrates the recipe's "
        "per-tensor FP8 KV-cache scales on a prompt set (the engine running the recipe, as the admission check fits "
        "them) and writes them as sglang_kv_scales.json, which the launch command passes with "
        "--quantization-param-path");
    command->add_option("RECIPE", options->recipePath, "Recipe file (.yaml, .yml or .json)")
        ->required()
        ->type_name("FILE");
    command->add_option("--to", options->target, "Target tool")
        ->required()
        ->check(CLI::IsMember(io::exportTargetChoices()));
    command
        ->add_option("--model,-m", options->modelPath,
            "Model directory holding config.json (or the config.json). Required: the ignored-layer lists name every "
            "module of this model, so a default model would silently export the wrong list. The ready-to-run "
            "commands load the model from this path")
        ->required()
        ->type_name("DIR");
    command
        ->add_option("--out,-o", options->outPath,
            "PATH ending in .json, .yaml or .yml: write the config file there. Any other PATH: a directory (created "
            "when missing) that receives the config file, the ready-to-run files and a README.txt. Every file is "
            "written through a temporary file. Without --out the config file goes to stdout")
        ->type_name("PATH");
    command->add_option("--staleness", options->staleness,
        "Asynchronous rollout weight staleness k in optimizer steps (verl only; 0: synchronous)");
    command
        ->add_option("--vllm-form", options->vllmForm,
            "vllm only. online (default): vLLM quantizes the BF16 checkpoint at load time. checkpoint: the "
            "quantization_config of a checkpoint already stored in FP8 (or in NVFP4, MXFP4, MXFP8: compressed-tensors)")
        ->check(CLI::IsMember({"online", "checkpoint"}));
    command
        ->add_option("--rollout", options->rollout,
            "verl only: the rollout engine, vllm (default) or sglang (which can leave modules in BF16)")
        ->check(CLI::IsMember({"vllm", "sglang"}));
    command->add_option("--target-version", options->targetVersion,
        std::string("vllm only: the vLLM release to write keys for (0.21, 0.22.1; default current). Before ")
            + io::kVllmOnlineFrontendRelease
            + " online FP8 is quantization fp8 with per-tensor scales and no ignore list, and the per-token-head KV "
              "formats are refused (from "
            + io::kVllmPerTokenHeadKvRelease + "); online mxfp8 is written from " + io::kVllmOnlineMxfp8Release
            + ", mxfp4 from " + io::kVllmOnlineMxfp4Release);
    command
        ->add_option("--kv-probe", options->kvProbe,
            "sglang only, for a recipe with an FP8 KV cache with per-tensor scales: a prompt set (JSONL). The model, "
            "its tokenizer and weights are loaded from --model, the engine running the recipe calibrates the FP8 "
            "KV-cache scales on these prompts (in order) as the admission check's screens fit them (amax / 448 of a "
            "BF16 forward, per layer, K and V), and the export writes them as sglang_kv_scales.json (SGLang's "
            "--quantization-param-path file; the launch command passes it). Needs --out DIRECTORY (or --json). "
            "Without it SGLang runs the FP8 KV cache with scales of 1.0")
        ->type_name("PROMPTS");
    options->kvProbeCountOption
        = command
              ->add_option("--kv-probe-count", options->kvProbeCount,
                  "With --kv-probe: calibrate on the first N prompts of the set (0, the default: all of them, as the "
                  "admission check's default --count fits its KV scales on every prompt it measures)")
              ->type_name("N")
              ->check(CLI::NonNegativeNumber);
    options->tensorParallelOption
        = command
              ->add_option("--tensor-parallel", options->tensorParallel,
                  "With --kv-probe: SGLang's tensor-parallel size (--tp-size) the scale file is written for; SGLang "
                  "needs exactly one entry per rank and ignores the file otherwise; sglang_launch.sh passes it (default 1)")
              ->type_name("N")
              ->check(CLI::Range(std::int64_t(1), std::int64_t(4096)));
    addDistillationOptions(*command, *options);
    command->callback([&context, options] {
        namespace fs = std::filesystem;
        io::ExportOptions exportOptions;
        exportOptions.target = *io::parseExportTarget(options->target); // CLI::IsMember checked the spellings
        exportOptions.staleness = options->staleness;
        exportOptions.vllmForm = *io::parseVllmForm(options->vllmForm);
        exportOptions.verlRollout = *io::parseVerlRollout(options->rollout);
        exportOptions.targetVersion = options->targetVersion == "current" ? "" : options->targetVersion;
        exportOptions.distillation = distillationOptions(*options);
        const bool modelIsDirectory = fs::is_directory(options->modelPath);
        const std::string configPath = modelIsDirectory
            ? (fs::path(options->modelPath) / "config.json").string()
            : options->modelPath;
        exportOptions.modelPath
            = modelIsDirectory ? options->modelPath : fs::path(options->modelPath).parent_path().string();
        // The directory whose files are read: the model's (a config.json alone reads only itself, unless the KV
        // probe loads the weights beside it).
        const std::string modelRead = modelIsDirectory || !options->kvProbe.empty() ? exportOptions.modelPath : "";
        requireOutputIsNoInput(*options, configPath, modelRead, {}); // before anything is read
        const quant::Recipe recipe = quant::loadRecipe(options->recipePath);
        const model::ModelConfig config = model::loadConfig(configPath);
        const quant::RecipePlan plan = quant::resolveRecipe(recipe, config);
        probeKvScales(*options, context.json, recipe, plan, exportOptions);
        const io::ExportResult result = io::exportBundle(recipe, plan, exportOptions);
        const bool directory = !options->outPath.empty() && !namesConfigFile(options->outPath);
        if (directory) {
            std::vector<std::string> names;
            for (const io::ExportFile& file : result.files) {
                names.push_back(file.name);
            }
            requireOutputIsNoInput(*options, configPath, modelRead, names);
            io::writeExportDirectory(options->outPath, result);
        } else if (!options->outPath.empty()) {
            writeFileAtomically(options->outPath, result.text);
        }
        if (context.json) {
            nlohmann::json files = nlohmann::json::array();
            for (const io::ExportFile& file : result.files) {
                files.push_back({{"name", file.name}, {"text", file.text}});
            }
            context.printJson({{"recipe_file", recipe.sourceFile}, {"model_config", configPath},
                {"target", options->target}, {"format", io::fileExtension(exportOptions.target)},
                {"out", options->outPath.empty() ? nlohmann::json() : nlohmann::json(options->outPath)},
                {"text", result.text}, {"warnings", result.warnings}, {"files", files}});
            return;
        }
        for (const std::string& warning : result.warnings) {
            *context.err << "warning: " << warning << "\n";
        }
        if (options->outPath.empty()) {
            *context.out << result.text;
        } else if (directory) {
            *context.out << "wrote " << result.files.size() << " files to " << options->outPath << " ("
                         << options->target << "):";
            for (const io::ExportFile& file : result.files) {
                *context.out << " " << file.name;
            }
            *context.out << "\n";
        } else {
            *context.out << "wrote " << options->outPath << " (" << options->target << ", "
                         << io::fileExtension(exportOptions.target) << ")\n";
        }
    });
}

const CommandRegistration registration(70, registerExportCommand);
} // namespace

} // namespace mismatch::cli
