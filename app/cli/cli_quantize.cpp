// mismatch quantize --format F [--granularity G] [--keep-dtype] IN.safetensors OUT.safetensors
// The options are the catalogue job "quantize"'s parameters (core/jobs/model_jobs.h); the work is
// quant::quantizeSafetensorsFile. Ctrl-C cancels between tensors (exit 130) and writes no output.
#include "app/cli/context.h"
#include "app/cli/job_options.h"
#include "app/cli/terminal_progress.h"
#include "core/jobs/model_jobs.h"
#include "core/quant/formats.h"

#include <cstdio>
#include <memory>
#include <ostream>

namespace mismatch::cli {

namespace {

std::string shapeText(const std::vector<std::int64_t>& shape)
{
    std::string text;
    for (std::size_t i = 0; i < shape.size(); ++i) {
        text += (i ? "x" : "") + std::to_string(shape[i]);
    }
    return text.empty() ? "scalar" : text;
}

std::string scientific(double value)
{
    char text[32];
    std::snprintf(text, sizeof text, "%.3e", value);
    return text;
}

void printReport(const Context& context, const jobs::QuantizeReport& report)
{
    if (context.json) {
        context.printJson(jobs::quantizeResultJson(report));
        return;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& r : report.tensors) {
        rows.push_back({r.name, shapeText(r.shape), r.inputDtype + " -> " + r.outputDtype,
            r.quantized ? "quantized" : "copied (" + r.note.substr(0, r.note.find(',')) + ")",
            r.quantized ? scientific(r.relativeRmsError) : "-", r.quantized ? scientific(r.maxAbsError) : "-",
            std::to_string(r.formatBytes)});
    }
    *context.out << quant::toString(report.options.format) << " (" << quant::toString(report.options.granularity)
                 << ") " << report.input << " -> " << report.output << "\n"
                 << formatTable(
                        {"tensor", "shape", "dtype", "action", "rel rms err", "max abs err", "format bytes"}, rows)
                 << report.quantized << " quantized, " << report.copied << " copied; storage in the format "
                 << report.formatBytes << " bytes (input file " << report.inputBytes << " bytes)\n";
}

void registerQuantizeCommand(CLI::App& app, Context& context)
{
    const jobs::JobDefinition& definition = *jobs::findJob("quantize");
    CLI::App* command = app.add_subcommand("quantize", definition.summary);
    auto job = std::make_shared<JobOptions>(command, definition);
    command->callback([&context, job] {
        const jobs::JobSpec spec = job->checkedSpec();
        TerminalProgress bar(*context.err);
        const jobs::QuantizeReport report = jobs::quantizeFile(spec, bar.progress());
        bar.finish();
        printReport(context, report);
    });
}

const CommandRegistration registration(41, registerQuantizeCommand);

} // namespace

} // namespace mismatch::cli
