#include "app/cli/cli.h"

#include "app/cli/context.h"
#include "core/common/error.h"
#include "core/common/runtime.h"

#include <CLI/CLI.hpp>

#include <ostream>

namespace mismatch::cli {

namespace {

std::string versionText()
{
    const RuntimeInfo info = runtimeInfo();
    return "mismatch " + info.version + " (git " + info.gitRevision + ", LibTorch " + info.torchVersion +
           ", CUDA kernels " + (info.cudaBuilt ? "built" : "not built") + ", CUDA device " +
           (info.cudaAvailable ? "available" : "not available") + ")";
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
        ->type_name("DIR");
    app.add_option("--threads", context.threads, "LibTorch threads (default: one per core)")
        ->check(CLI::NonNegativeNumber);
    app.add_flag("--json", context.json, "Print results as JSON on stdout");

    for (const Registrar& registrar : registeredCommands()) {
        registrar(app, context);
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
    } catch (const std::exception& error) {
        err << "mismatch: internal error: " << error.what() << "\n";
        return 1;
    }
    return 0;
}

}  // namespace mismatch::cli
