#include "app/cli/cli.h"

#include "app/cli/context.h"
#include "core/common/error.h"
#include "core/common/runtime.h"
#include "core/common/utf8.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <set>
#include <thread>

namespace mismatch::cli {

namespace {

std::string versionText()
{
    const RuntimeInfo info = runtimeInfo();
    return "mismatch " + info.version + " (git " + info.gitRevision + ", LibTorch " + info.torchVersion +
           ", CUDA kernels " + (info.cudaBuilt ? "built" : "not built") + ", CUDA device " +
           (info.cudaAvailable ? "available" : "not available") +
           (info.openblasCore.empty() ? std::string() : ", OpenBLAS core " + info.openblasCore) + ")";
}

// CLI11 2.1 converts whole numbers with strtoll / strtoull without looking at errno: digits past the int64 range
// saturate to 9223372036854775807 and "-1" wraps around in an unsigned option, so "--step 1e23-as-digits" would
// quietly mean another number. Every whole-number option (type INT or UINT), in every subcommand, refuses them.
void refuseOutOfRangeWholeNumbers(CLI::App& app)
{
    for (CLI::Option* option : app.get_options()) {
        const std::string type = option->get_type_name();
        if (type != "INT" && type != "UINT") {
            continue;
        }
        const bool isSigned = type == "INT";
        option->check(CLI::Validator(
            [isSigned](std::string& text) -> std::string {
                const std::string range = isSigned ? "-9223372036854775808 to 9223372036854775807"
                                                   : "0 to 18446744073709551615";
                char* end = nullptr;
                errno = 0;
                if (isSigned) {
                    std::strtoll(text.c_str(), &end, 0);
                } else {
                    std::strtoull(text.c_str(), &end, 0);
                }
                if (text.empty() || end != text.c_str() + text.size()) {
                    return {}; // not a whole number: the option's own conversion error
                }
                if (errno == ERANGE || (!isSigned && text.find('-') != std::string::npos)) {
                    return "must be a whole number from " + range + ", got " + text;
                }
                return {};
            },
            ""));
    }
    for (CLI::App* subcommand : app.get_subcommands({})) {
        refuseOutOfRangeWholeNumbers(*subcommand);
    }
}

// An empty argument is an unset shell variable (`--resume "$RUN"`, `-p "$PROMPTS"`) far more often than a wish:
// taken as a value it would mean no run, or a file named "" that messages call "<input>". Every option that takes
// a value refuses it, named, in every subcommand, except those in `allowed` (Context::emptyValueAllowed). The
// catalogue's own check (JobSpec: "expected a non-empty value") says the same for job files.
void refuseEmptyValues(CLI::App& app, const std::set<const CLI::Option*>& allowed)
{
    for (CLI::Option* option : app.get_options()) {
        if (option->get_items_expected_max() == 0 || allowed.count(option)) {
            continue; // a flag, or an option whose empty value means something
        }
        option->check(CLI::Validator(
            [](std::string& text) -> std::string {
                return text.empty() ? "expected a non-empty value, got ''" : std::string();
            },
            ""));
    }
    for (CLI::App* subcommand : app.get_subcommands({})) {
        refuseEmptyValues(*subcommand, allowed);
    }
}

}  // namespace

int run(const std::vector<std::string>& arguments, std::ostream& out, std::ostream& err)
{
    CLI::App app{"Mismatch Lab: measure training-inference mismatch for on-policy distillation, calibrate a "
                 "student's mismatch budget and screen rollout configurations against it.",
        "mismatch"};
    app.set_version_flag("--version", versionText());
    app.require_subcommand(1);
    app.fallthrough();

    Context context;
    context.out = &out;
    context.err = &err;
    app.add_option("--workspace,-w", context.workspace,
           "Workspace directory (holds workspace.db); default: $MISMATCH_WORKSPACE or "
           "~/.local/share/mismatch-lab/default")
        ->type_name("DIR")
        ->check(CLI::Validator(
            [](std::string& text) -> std::string {
                // An empty value (an unset shell variable) must not quietly mean the default workspace.
                return text.empty() ? "is empty (leave the option out for the default workspace)" : "";
            },
            "DIR"));
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    app.add_option("--threads", context.threads, "LibTorch threads (default: one per core; at most the cores)")
        ->check(CLI::Validator(
            [cores](std::string& text) -> std::string {
                char* end = nullptr;
                const long long value = std::strtoll(text.c_str(), &end, 10);
                if (end != text.c_str() + text.size() || text.empty()) {
                    return {}; // not a number: the option's own conversion error
                }
                if (value < 0 || value > cores) {
                    return "must be 0 (one per core) to " + std::to_string(cores) + " (the cores of this machine), got "
                        + text;
                }
                return {};
            },
            "0-" + std::to_string(cores)));
    app.add_flag("--json", context.json, "Print results as JSON on stdout");

    for (const Registrar& registrar : registeredCommands()) {
        registrar(app, context);
    }
    refuseOutOfRangeWholeNumbers(app);
    refuseEmptyValues(app, context.emptyValueAllowed);

    // Paths and names end up in the workspace and in JSON output, both UTF-8 text: refuse other bytes here, with
    // the argument named, rather than fail later inside a job.
    for (std::size_t i = 1; i < arguments.size(); ++i) {
        if (const std::size_t bad = firstInvalidUtf8(arguments[i]); bad != std::string::npos) {
            err << "mismatch: argument " << i << " is not valid UTF-8 (byte " << bad
                << "): paths and names are stored as UTF-8 text; rename the file or directory\n";
            return 2;
        }
    }
    // CLI11 wants argv without the program name.
    std::vector<std::string> reversed(arguments.rbegin(), arguments.rend());
    if (!reversed.empty()) {
        reversed.pop_back();
    }
    try {
        app.parse_complete_callback([&context] { initializeRuntime(context.threads); });
        app.parse(reversed);
    } catch (const CLI::ParseError& error) {
        // --help and --version end parsing with code 0; every real parse error exits 2.
        return app.exit(error, out, err) == 0 ? 0 : 2;
    } catch (const CancelledError& error) {
        err << "mismatch: " << error.what() << "\n";
        return 130;
    } catch (const Error& error) {
        err << "mismatch: error: " << error.what() << "\n";
        return 1;
    } catch (const std::filesystem::filesystem_error& error) {
        // The path the system refused and its reason, as an input error would name them.
        err << "mismatch: error: " << (error.path1().empty() ? std::string("<path>") : error.path1().string()) << ": "
            << error.code().message() << "\n";
        return 1;
    } catch (const std::exception& error) {
        err << "mismatch: internal error: " << error.what() << "\n";
        return 1;
    }
    return 0;
}

}  // namespace mismatch::cli
