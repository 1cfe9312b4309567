// mismatch logits --model DIR --prompts P.jsonl --out FILE.safetensors [--with-answer] [--bf16]
// The options are the catalogue job "logits"'s parameters (core/jobs/model_jobs.h); the work is
// analysis::writeReferenceLogits. Ctrl-C cancels (exit 130) and writes no output.
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/jobs/model_jobs.h"

#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

void registerLogitsCommand(CLI::App& app, Context& context)
{
    const jobs::JobDefinition& definition = *jobs::findJob("logits");
    CLI::App* command = app.add_subcommand("logits", definition.summary);
    auto job = std::make_shared<JobOptions>(command, definition);
    command->callback([&context, job] {
        const jobs::JobSpec spec = job->checkedSpec();
        TerminalProgress bar(*context.err);
        const analysis::ReferenceLogitsFile r = analysis::writeReferenceLogits(
            spec.text("model"), spec.text("prompts"), spec.text("out"), jobs::logitsOptions(spec), bar.progress());
        bar.finish();
        if (context.json) {
            context.printJson(jobs::logitsResultJson(r));
        } else {
            *context.out << "wrote " << r.prompts << " prompts, " << r.positions << " positions to " << r.out << "\n";
        }
    });
}

const CommandRegistration registration(22, registerLogitsCommand);

} // namespace

} // namespace mismatch::cli
