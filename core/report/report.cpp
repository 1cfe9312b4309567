#include "core/report/report.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/utc_time.h"
#include "core/common/version.h"
#include "core/report/analysis_data.h"
#include "core/store/analysis_store.h"
#include "core/store/breakdown_store.h"
#include "core/store/evaluation_store.h"
#include "core/store/find_run.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

namespace mismatch::report {

namespace fs = std::filesystem;

namespace {

std::string escapeHtml(const std::string& text)
{
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        default: out += c;
        }
    }
    return out;
}

std::string number(double value, int digits = 4)
{
    if (!std::isfinite(value)) {
        return "-";
    }
    char buffer[64];
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, value);
    return buffer;
}

std::string number(const std::optional<double>& value, int digits = 4)
{
    return value ? number(*value, digits) : "-";
}

std::string interval(const std::optional<double>& low, const std::optional<double>& high)
{
    return low && high ? "[" + number(*low, 3) + ", " + number(*high, 3) + "]" : "-";
}

std::string percent(const std::optional<double>& fraction)
{
    if (!fraction) {
        return "-";
    }
    char buffer[32];
    std::snprintf(buffer, sizeof buffer, "%+.1f%%", *fraction * 100.0);
    return buffer;
}

// A number stored under `key` in a JSON object, or nothing (absent, null or not a number).
std::optional<double> jsonNumber(const nlohmann::json& object, const char* key)
{
    return object.is_object() && object.contains(key) && object.at(key).is_number()
        ? std::optional<double>(object.at(key).get<double>())
        : std::nullopt;
}

// "12.3x": `mismatch` in multiples of the BF16 unit; "-" without a (positive) unit.
std::string bf16Multiple(double mismatch, const std::optional<double>& unit)
{
    return unit && *unit > 0 ? number(mismatch / *unit, 3) + "x" : "-";
}

// A CSV field as RFC 4180 quotes it: in double quotes (doubled inside) when it holds a comma, quote or line break.
std::string csvField(const std::string& field)
{
    if (field.find_first_of(",\"\r\n") == std::string::npos) {
        return field;
    }
    std::string quoted = "\"";
    for (char c : field) {
        quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    }
    return quoted + "\"";
}

// A table both as HTML (in the page) and as CSV (a header line, then one line per row, CRLF line ends: the GUI's
// "Export table as CSV").
struct Table {
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
    std::map<std::pair<size_t, size_t>, std::string> cellClass; // (row, column) -> CSS class
};

const char* kStyle = R"(body{font-family:sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{font-size:1.3em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.05em;margin-top:1.4em}table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left}th{background:#f3f3f3}
td.num{text-align:right;font-variant-numeric:tabular-nums}img{max-width:100%;border:1px solid #ddd}
.pass,.admit{color:#2e7d32;font-weight:bold}.fail,.reject{color:#c62828;font-weight:bold}
.borderline,.undecided{color:#ef8a17;font-weight:bold}
.flag{background:#fff3cd;border:1px solid #e0b84c;padding:.3em .8em;margin:.6em 0}.note{color:#555;font-size:.9em}code{background:#f3f3f3;padding:0 .2em}
)";

class ReportWriter {
public:
    ReportWriter(store::RunStore& store, const ReportOptions& options, Progress& progress, PlotRenderer* renderer)
        : store_(store)
        , options_(options)
        , progress_(progress)
        , renderer_(renderer)
        , out_(fs::absolute(options.outDirectory))
    {
    }

    ReportResult write(const std::vector<store::RunInfo>& studyRuns)
    {
        prepareDirectories();
        const bool workspace = studyRuns.empty();
        const std::string title = workspace ? "Workspace report"
                                            : "Report: run #" + std::to_string(studyRuns.front().id) + " "
                + studyRuns.front().name + " (" + studyRuns.front().kind + ")";
        html_ += "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" + escapeHtml(title)
            + "</title>\n<style>" + kStyle + "</style></head><body>\n<h1>" + escapeHtml(title) + "</h1>\n";
        html_ += "<p class=\"note\">Workspace <code>" + escapeHtml(store_.path()) + "</code>; written "
            + utcTimestamp() + " by Mismatch Lab "
            + kVersion + " (<code>mismatch report " + escapeHtml(options_.study)
            + "</code>). Mismatch is KL(&mu; || &pi;) in nats per token; intervals are 95% bootstrap intervals over "
              "prompts or problems.</p>\n";
        if (!renderer_) {
            html_ += "<div class=\"flag\">" + escapeHtml(kNoPlotsNote) + "</div>\n";
        }
        if (workspace) {
            writeWorkspace();
        } else {
            writeRun(studyRuns.front());
        }
        html_ += "</body></html>\n";
        progress_.checkCancelled();
        const std::string index = (out_ / "index.html").string();
        writeFileAtomically(index, html_);
        result_.files.push_back("index.html");
        result_.indexPath = index;
        result_.withPlots = renderer_ != nullptr;
        progress_.update(1.0, "report written");
        return result_;
    }

private:
    void prepareDirectories()
    {
        std::error_code error;
        std::vector<fs::path> directories {out_, out_ / "tables"};
        if (renderer_) {
            directories.push_back(out_ / "plots");
        }
        for (const fs::path& directory : directories) {
            fs::create_directories(directory, error);
            if (error || !fs::is_directory(directory)) {
                throw InputError(directory.string(), "", "cannot create the report directory"
                        + (error ? ": " + error.message() : std::string()));
            }
        }
    }

    void beginSection(const std::string& title, const std::string& level = "h2")
    {
        progress_.checkCancelled();
        ++sectionIndex_;
        progress_.update(std::min(0.95, 0.05 + 0.05 * sectionIndex_), title);
        html_ += "<" + level + ">" + escapeHtml(title) + "</" + level + ">\n";
        result_.sections.push_back({title, {}, {}});
    }

    void paragraph(const std::string& text, bool note = false)
    {
        html_ += note ? "<p class=\"note\">" + text + "</p>\n" : "<p>" + text + "</p>\n";
    }

    // Has the renderer draw `request` under plots/NAME.png at the report's width (and `height`, else the report's
    // height) and shows it; nothing without a renderer, or when the view has nothing to show for the request.
    void addPlot(PlotRequest request, const std::string& name, const std::string& caption, int height = 0)
    {
        if (!renderer_) {
            return;
        }
        progress_.checkCancelled();
        request.width = options_.plotWidth;
        request.height = height > 0 ? height : options_.plotHeight;
        const std::string relative = "plots/" + name + ".png";
        if (!renderer_->render(store_, request, (out_ / relative).string())) {
            return;
        }
        html_ += "<figure><img src=\"" + relative + "\" alt=\"" + escapeHtml(caption) + "\" width=\""
            + std::to_string(options_.plotWidth) + "\"><figcaption class=\"note\">" + escapeHtml(caption)
            + "</figcaption></figure>\n";
        result_.files.push_back(relative);
        result_.sections.back().plots.push_back(relative);
    }

    void addTable(const Table& table, const std::string& name)
    {
        html_ += "<table><tr>";
        std::string csv;
        for (size_t c = 0; c < table.header.size(); ++c) {
            html_ += "<th>" + escapeHtml(table.header[c]) + "</th>";
            csv += (c > 0 ? "," : "") + csvField(table.header[c]);
        }
        html_ += "</tr>\n";
        csv += "\r\n";
        for (size_t r = 0; r < table.rows.size(); ++r) {
            html_ += "<tr>";
            for (size_t c = 0; c < table.rows[r].size(); ++c) {
                const std::string& cell = table.rows[r][c];
                const auto klass = table.cellClass.find({r, c});
                const bool numeric = !cell.empty()
                    && (std::isdigit(static_cast<unsigned char>(cell[0])) || cell[0] == '-' || cell[0] == '+'
                        || cell[0] == '[');
                std::string attributes;
                if (klass != table.cellClass.end()) {
                    attributes = " class=\"" + klass->second + "\"";
                } else if (numeric && cell != "-") {
                    attributes = " class=\"num\"";
                }
                html_ += "<td" + attributes + ">" + escapeHtml(cell) + "</td>";
                csv += (c > 0 ? "," : "") + csvField(cell);
            }
            for (size_t c = table.rows[r].size(); c < table.header.size(); ++c) {
                csv += ","; // a short row's missing cells are empty
            }
            html_ += "</tr>\n";
            csv += "\r\n";
        }
        html_ += "</table>\n";
        const std::string relative = "tables/" + name + ".csv";
        writeFileAtomically((out_ / relative).string(), csv);
        html_ += "<p class=\"note\">CSV: <a href=\"" + relative + "\">" + relative + "</a></p>\n";
        result_.files.push_back(relative);
        result_.sections.back().tables.push_back(relative);
    }

    std::string runName(std::int64_t runId)
    {
        const auto run = store_.run(runId);
        return run ? run->name : "#" + std::to_string(runId);
    }

    // ---- workspace -----------------------------------------------------------------------------------------

    void writeWorkspace()
    {
        const std::vector<store::RunInfo> runs = store_.listRuns();
        beginSection("Runs");
        Table table {{"Run", "Name", "Kind", "Status", "Steps", "Last mismatch", "Started (UTC)"}, {}, {}};
        for (const auto& run : runs) {
            table.rows.push_back({"#" + std::to_string(run.id), run.name, run.kind, store::toString(run.status),
                std::to_string(run.stepCount), number(run.lastMismatch), run.startedAt});
        }
        addTable(table, "runs");
        paragraph("A run's own plots: <code>mismatch report RUN --out DIR</code>.", true);
        if (runs.empty()) {
            paragraph("The workspace holds no runs yet.");
        }
        for (const auto& calibration : store::calibrations(store_)) {
            writeCalibration(calibration.id);
        }
        std::set<std::int64_t> admissionRuns;
        bool unlinkedDecisions = false;
        for (const auto& decision : store::admissionDecisions(store_)) {
            if (decision.runId) {
                admissionRuns.insert(*decision.runId);
            } else {
                unlinkedDecisions = true;
            }
        }
        for (std::int64_t runId : admissionRuns) {
            writeAdmission(runId);
        }
        if (unlinkedDecisions) {
            writeAdmission(std::nullopt);
        }
        for (const auto& scan : store::sensitivityScans(store_)) {
            writeSensitivity(scan.id);
        }
        for (const auto& record : store::prefixShifts(store_)) {
            writePrefixShift(record.id);
        }
        std::set<std::int64_t> breakdownRuns;
        for (const auto& record : store::breakdowns(store_)) {
            breakdownRuns.insert(record.runId.value_or(0));
        }
        for (const std::int64_t runId : breakdownRuns) {
            writeBreakdown(runId);
        }
        for (const auto& run : runs) {
            if (run.kind == "compare_objectives") {
                writeCompareObjectives(run);
            } else if (run.kind == "time_to_quality") {
                writeTimeToQuality(run);
            }
        }
    }

    // ---- one run -------------------------------------------------------------------------------------------

    void writeRun(const store::RunInfo& run)
    {
        beginSection("Run #" + std::to_string(run.id) + " " + run.name);
        Table info {{"Kind", "Status", "Started (UTC)", "Finished (UTC)", "Steps", "Tool version"}, {}, {}};
        info.rows.push_back({run.kind, store::toString(run.status), run.startedAt,
            run.finishedAt.empty() ? "-" : run.finishedAt, std::to_string(run.stepCount), run.toolVersion});
        addTable(info, "run-" + std::to_string(run.id));
        if (!run.error.empty()) {
            paragraph("Ended with: " + escapeHtml(run.error));
        }
        bool wrote = false;
        if (run.kind == "calibrate" || run.kind == "demo") {
            for (const auto& calibration : store::calibrations(store_)) {
                if (calibration.runId == run.id) {
                    writeCalibration(calibration.id);
                    wrote = true;
                }
            }
        }
        if (run.kind == "demo") {
            const auto config = nlohmann::json::parse(run.configJson, nullptr, false);
            if (config.is_object() && config.contains("calibration_id") && !wrote) {
                writeCalibration(config.at("calibration_id").get<std::int64_t>());
            }
            if (config.is_object() && config.contains("admission_run_id")) {
                writeAdmission(config.at("admission_run_id").get<std::int64_t>());
            }
            wrote = true;
        }
        if (run.kind == "admit") {
            writeAdmission(run.id);
            wrote = true;
        }
        if (run.kind == "sensitivity") {
            for (const auto& scan : store::sensitivityScans(store_)) {
                if (scan.runId == run.id) {
                    writeSensitivity(scan.id);
                    wrote = true;
                }
            }
        }
        if (run.kind == "prefix_shift") {
            for (const auto& record : store::prefixShifts(store_)) {
                if (record.runId == run.id) {
                    writePrefixShift(record.id);
                    wrote = true;
                }
            }
        }
        if (run.kind == "breakdown") {
            writeBreakdown(run.id);
            wrote = true;
        }
        if (run.kind == "compare_objectives") {
            writeCompareObjectives(run);
            wrote = true;
        }
        if (run.kind == "time_to_quality") {
            writeTimeToQuality(run);
            wrote = true;
        }
        if (run.stepCount > 0 || !store::evaluations(store_, run.id).empty()) {
            writeTraining(run);
            wrote = true;
        }
        if (!wrote) {
            paragraph(run.status == store::RunStatus::Finished
                    ? "This run stored no results that a report shows (no steps, evaluations or analysis rows)."
                    : "This run stored no results yet (status " + store::toString(run.status) + ").");
        }
    }

    void writeTraining(const store::RunInfo& run)
    {
        beginSection("Training run #" + std::to_string(run.id) + " " + run.name, "h3");
        PlotRequest plot;
        plot.kind = PlotRequest::Kind::TrainingRun;
        plot.id = run.id;
        plot.runName = run.name;
        addPlot(plot, "run-" + std::to_string(run.id),
            "Per-step mismatch (full-vocabulary KL, k1, k3; BF16 multiple on the right axis) and quality Q and "
            "accuracy at the evaluation points.",
            options_.plotHeight * 6 / 5);
        Table table {{"Step", "Quality Q (nats/token)", "Accuracy", "Problems", "Evaluated (UTC)"}, {}, {}};
        for (const auto& e : store::evaluations(store_, run.id)) {
            table.rows.push_back({std::to_string(e.step), number(e.quality), number(e.accuracy, 3),
                std::to_string(e.problemCount), e.createdAt});
        }
        if (!table.rows.empty()) {
            addTable(table, "run-" + std::to_string(run.id) + "-evaluations");
        }
    }

    void writeCalibration(std::int64_t calibrationId)
    {
        const auto calibration = store::calibration(store_, calibrationId);
        if (!calibration) {
            return;
        }
        const std::string id = std::to_string(calibrationId);
        beginSection("Calibration #" + id + " " + calibration->info.name);
        // The failure rule as this calibration applied it (its config_json; the spec's defaults when absent).
        const auto config = nlohmann::json::parse(calibration->info.configJson, nullptr, false);
        const double rise = jsonNumber(config, "relative_threshold").value_or(0.2);
        const auto confidence = jsonNumber(config, "confidence");
        const auto resamples = jsonNumber(config, "resamples");
        const std::string rule = "a rise of quality Q by " + number(rise * 100.0, 3) + "% or more, with the "
            + (confidence ? number(*confidence * 100.0, 3) + "% " : std::string())
            + "paired interval of the mean per-problem difference above zero"
            + (resamples ? ", " + number(*resamples, 8) + " bootstrap resamples" : std::string());
        paragraph("Student <code>" + escapeHtml(calibration->info.student)
            + "</code>. Each point is one training run of the sweep at one step, compared with the BF16-engine "
              "baseline by the failure rule ("
            + rule + "); the budget bracket is [largest passing, smallest failing] mismatch.");
        if (config.is_object() && config.contains("flags") && config.at("flags").is_array()
            && !config.at("flags").empty()) {
            std::string flags;
            for (const auto& flag : config.at("flags")) {
                if (!flag.is_object()) {
                    continue;
                }
                flags += "<li><b>" + escapeHtml(flag.value("kind", std::string("flag"))) + "</b>"
                    + (flag.contains("step") && flag.at("step").is_number_integer()
                            ? " at step " + std::to_string(flag.at("step").get<std::int64_t>())
                            : std::string())
                    + ": " + escapeHtml(flag.value("reason", std::string())) + "</li>";
            }
            html_ += "<div class=\"flag\"><b>&#9888; This budget is flagged by its calibration's protocol:</b><ul>"
                + flags + "</ul></div>\n";
        }
        Table brackets {{"Step", "Largest passing", "Smallest failing", "Admission threshold"}, {}, {}};
        for (const auto& b : calibration->brackets) {
            brackets.rows.push_back({std::to_string(b.step), number(b.largestPassing), number(b.smallestFailing),
                number(b.threshold)});
        }
        addTable(brackets, "calibration-" + id + "-brackets");

        std::set<std::int64_t> steps;
        for (const auto& p : calibration->points) {
            steps.insert(p.step);
        }
        for (const auto& b : calibration->brackets) {
            steps.insert(b.step);
        }
        for (std::int64_t step : steps) {
            PlotRequest plot;
            plot.kind = PlotRequest::Kind::CalibrationStep;
            plot.id = calibrationId;
            plot.step = step;
            addPlot(plot, "calibration-" + id + "-step-" + std::to_string(step),
                "Step " + std::to_string(step)
                    + ": quality change against the BF16 baseline by mismatch (log axis), passed green, failed "
                      "red, the budget bracket shaded and the admission threshold dashed.");
        }

        paragraph("x BF16: the mismatch over the BF16 unit of the point's own runs (the plain BF16 engine at their "
                  "weights on the same prompts and seeds) averaged over steps 1 to the point's step, so the baseline "
                  "is 1x at every step.");
        // Mismatch: the screen statistic (each seed's checkpoint at the step, measured as admit does); the training
        // mean beside it ("-" in calibrations stored before, whose mismatch is that training mean).
        Table points {{"Run", "Step", "Mismatch", "Training mean", "x BF16", "Quality Q", "Change vs BF16",
                          "95% interval of mean q diff", "Result"},
            {}, {}};
        std::vector<std::pair<std::int64_t, std::string>> curves;
        for (const auto& p : calibration->points) {
            const std::string name = runName(p.runId);
            // A replicate mean is stored under its first seed's run; name it by its configuration instead.
            const std::string shown = p.replicates > 1 && !p.label.empty()
                ? calibration->info.name + "/" + p.label + " (mean of " + std::to_string(p.replicates) + " seeds)"
                : name;
            points.cellClass[{points.rows.size(), 8}] = p.verdict; // "pass", "fail" or "undecided"
            points.rows.push_back({shown, std::to_string(p.step), number(p.mismatch),
                p.trainingMismatch ? number(*p.trainingMismatch) : std::string("-"), bf16Multiple(p.mismatch, p.bf16Unit), number(p.quality), percent(p.relativeChange),
                interval(p.ciLow, p.ciHigh), p.failed() ? "failed" : p.undecided() ? "undecided" : "passed"});
            if (std::none_of(curves.begin(), curves.end(), [&](const auto& c) { return c.first == p.runId; })) {
                curves.emplace_back(p.runId, name);
            }
        }
        addTable(points, "calibration-" + id + "-points");

        // A shipped or imported calibration carries its points but not its runs' steps.
        const bool haveSteps = std::any_of(curves.begin(), curves.end(), [this](const auto& c) {
            const auto run = store_.run(c.first);
            return run && run->stepCount > 0;
        });
        if (!haveSteps) {
            paragraph("The sweep's runs have no per-step measures in this workspace (a shipped or imported "
                      "calibration), so there are no curves to show.",
                true);
        } else {
            addPlot(curvesPlot(PlotRequest::Kind::MismatchCurves, curves), "calibration-" + id + "-mismatch",
                "The sweep's runs: per-step mismatch (log axis).");
            addPlot(curvesPlot(PlotRequest::Kind::QualityCurves, curves), "calibration-" + id + "-quality",
                "The sweep's runs: quality Q (nats/token, lower is better) at the evaluation points.");
        }
    }

    void writeAdmission(std::optional<std::int64_t> runId)
    {
        const auto decisions = store::admissionDecisions(store_, runId);
        std::vector<store::AdmissionDecision> shown;
        for (const auto& d : decisions) {
            if (d.runId == runId) {
                shown.push_back(d);
            }
        }
        if (shown.empty()) {
            return;
        }
        const std::string name = runId ? std::to_string(*runId) : "unlinked";
        beginSection(runId ? "Admission check (run #" + name + ")" : "Admission decisions without a run");
        std::map<std::string, int> counts;
        double seconds = 0.0;
        for (const auto& d : shown) {
            ++counts[d.decision];
            seconds += d.seconds;
        }
        paragraph(std::to_string(shown.size()) + " decisions: " + std::to_string(counts["admit"]) + " admitted, "
            + std::to_string(counts["borderline"]) + " borderline, " + std::to_string(counts["reject"])
            + " rejected, in " + number(seconds, 3)
            + " s. A candidate is admitted when its whole interval lies below the threshold, rejected when it lies "
              "above, borderline when it straddles it.");
        PlotRequest plot;
        plot.kind = PlotRequest::Kind::Admission;
        plot.runId = runId;
        addPlot(plot, "admission-" + name, "Mismatch of each candidate with its 95% bootstrap interval "
                                                  "against the admission threshold (dashed).",
            std::max(options_.plotHeight * 3 / 5, 90 + 34 * static_cast<int>(shown.size())));
        Table table {{"Candidate", "Checkpoint", "Mismatch", "95% interval", "Threshold", "BF16 multiple", "Decision",
                         "Seconds", "Notes"},
            {}, {}};
        for (const AdmissionDecision& d : AnalysisData(store_).admissionDecisions()) {
            if (d.runId != runId) {
                continue;
            }
            const auto multiple = bf16Multiple(d);
            table.cellClass[{table.rows.size(), 6}] = d.decision;
            table.rows.push_back({d.candidateName, fs::path(d.checkpoint).filename().string(), number(d.mismatch),
                interval(d.ciLow, d.ciHigh), number(d.threshold), multiple ? number(*multiple, 3) + "x" : "-",
                d.decision, number(d.seconds, 3), admissionNotes(d, "; ")});
        }
        addTable(table, "admission-" + name);
    }

    void writeSensitivity(std::int64_t scanId)
    {
        const auto scan = store::sensitivityScan(store_, scanId);
        if (!scan) {
            return;
        }
        const std::string id = std::to_string(scanId);
        beginSection("Layer sensitivity scan #" + id + " (" + scan->info.format + ")");
        const bool kvCells = std::any_of(scan->cells.begin(), scan->cells.end(),
            [](const store::SensitivityCell& cell) { return cell.moduleGroup == "kv"; });
        const std::string kvFormat = kvCells ? scanKvFormat(scan->info.configJson) : std::string();
        paragraph("Each cell is the mismatch added over the BF16 unit (" + number(scan->info.bf16Unit)
            + " nats/token) when only that layer's module group is quantized to " + escapeHtml(scan->info.format)
            + (kvFormat.empty() ? std::string() : " (its KV cache, in the kv cells, to " + escapeHtml(kvFormat) + ")")
            + "; " + std::to_string(scan->cells.size()) + " cells, scan " + escapeHtml(scan->info.status) + ".");
        PlotRequest plot;
        plot.kind = PlotRequest::Kind::Sensitivity;
        plot.id = scanId;
        addPlot(plot, "sensitivity-" + id,
            "Added mismatch (nats/token) per layer and module group; row -1 holds the embedding and lm_head.",
            options_.plotHeight * 6 / 5);
        std::vector<store::SensitivityCell> cells = scan->cells;
        std::stable_sort(cells.begin(), cells.end(),
            [](const auto& a, const auto& b) { return a.addedMismatch > b.addedMismatch; });
        Table table {{"Rank", "Layer", "Module group", "Added mismatch", "95% interval", "Mismatch",
                         "BF16 multiple"},
            {}, {}};
        for (size_t i = 0; i < cells.size(); ++i) {
            const auto& c = cells[i];
            table.rows.push_back({std::to_string(i + 1), c.layer < 0 ? "-" : std::to_string(c.layer), c.moduleGroup,
                number(c.addedMismatch), interval(c.ciLow, c.ciHigh), number(c.mismatch),
                bf16Multiple(c.mismatch, scan->info.bf16Unit)});
        }
        addTable(table, "sensitivity-" + id);
    }

    void writePrefixShift(std::int64_t recordId)
    {
        const auto record = store::prefixShift(store_, recordId);
        if (!record) {
            return;
        }
        const std::string id = std::to_string(recordId);
        beginSection("Prefix shift #" + id);
        const auto details = nlohmann::json::parse(record->detailsJson, nullptr, false);
        const auto [shiftLow, shiftHigh] = prefixShiftInterval(record->detailsJson);
        paragraph("Model <code>" + escapeHtml(record->model) + "</code>; " + std::to_string(record->pairs)
            + " paired same-seed generations, " + std::to_string(record->diverged)
            + " diverged from the BF16 engine's.");
        Table table {{"Part", "Nats/token", "95% interval", "BF16 multiple"}, {}, {}};
        const auto multiple = [&](double v) {
            return bf16Multiple(v, record->bf16Unit);
        };
        table.rows.push_back({"total (own prefixes)", number(record->total),
            interval(record->totalCiLow, record->totalCiHigh), multiple(record->total)});
        table.rows.push_back({"per-token (BF16 prefixes, teacher-forced)", number(record->perToken),
            interval(record->perTokenCiLow, record->perTokenCiHigh), multiple(record->perToken)});
        table.rows.push_back({"prefix shift (total - per-token)", number(record->prefixShift),
            interval(shiftLow, shiftHigh), multiple(record->prefixShift)});
        table.rows.push_back({"BF16 unit", number(record->bf16Unit), "-", "1x"});
        addTable(table, "prefix-shift-" + id);

        {
            // The viewer draws mismatch by position from the stored details when they hold it, else from the
            // stored pairs.
            const bool fromAllPairs
                = details.is_object() && details.contains("by_position") && details.at("by_position").is_array();
            PlotRequest plot;
            plot.kind = PlotRequest::Kind::PrefixShiftPositions;
            plot.id = recordId;
            addPlot(plot, "prefix-shift-" + id,
                std::string("Mismatch by response position")
                    + (fromAllPairs ? " over every analysed pair" : " over the stored pairs")
                    + ": total on the candidate's own prefixes, per-token on the BF16 engine's, and the BF16 unit.");
            plot.kind = PlotRequest::Kind::PrefixShiftDivergence;
            addPlot(plot, "prefix-shift-" + id + "-divergence",
                "First divergence of each paired generation, by response position.", options_.plotHeight * 3 / 5);
            // The first pair that diverged, token by token, coloured by per-token KL.
            const auto pairs = store::prefixShiftPairs(store_, recordId);
            int shownPair = 0;
            for (size_t i = 0; i < pairs.size(); ++i) {
                if (pairs[i].firstDivergence) {
                    shownPair = static_cast<int>(i);
                    break;
                }
            }
            if (!pairs.empty()) {
                plot.kind = PlotRequest::Kind::PrefixShiftPair;
                plot.pair = shownPair;
                addPlot(plot, "prefix-shift-" + id + "-pair",
                    "Pair " + std::to_string(shownPair + 1) + " (prompt " + pairs[shownPair].promptId
                        + "): the candidate's and the BF16 engine's responses, each token coloured by its "
                          "KL(mu || pi), the first divergence marked.");
            }
        }
        if (details.is_object() && details.contains("corrections") && details.at("corrections").is_array()
            && !details.at("corrections").empty()) {
            Table corrections {{"Correction", "Cap", "Total", "Per-token", "Prefix shift", "Tokens affected (own)"},
                {}, {}};
            for (const auto& c : details.at("corrections")) {
                if (!c.is_object()) {
                    continue;
                }
                const auto value = [&c](const char* key) { return jsonNumber(c, key); };
                corrections.rows.push_back({c.value("kind", std::string("?")), number(value("cap")),
                    number(value("total")), number(value("per_token")), number(value("prefix_shift")),
                    value("affected_own") ? number(*value("affected_own") * 100.0, 3) + "%" : "-"});
            }
            paragraph("Effect of the TIS/MIS corrections on each part (importance-weighted mismatch):");
            addTable(corrections, "prefix-shift-" + id + "-corrections");
        }
    }

    void writeCompareObjectives(const store::RunInfo& run)
    {
        const std::string id = std::to_string(run.id);
        beginSection("Objectives under mismatch (run #" + id + ")");
        const auto config = nlohmann::json::parse(run.configJson, nullptr, false);
        if (!config.is_object() || !config.contains("rows") || !config.at("rows").is_array()) {
            paragraph("The comparison stored no results (status " + store::toString(run.status) + ").");
            return;
        }
        paragraph("OPD breaks by the failure rule against its BF16-engine run; REINFORCE and GRPO break when "
                  "their reward collapses against their own BF16-engine run.");
        Table table {{"Objective", "Configuration", "Run", "Mismatch", "BF16 multiple", "Quality Q",
                         "Change vs BF16", "Reward", "Verdict"},
            {}, {}};
        std::vector<std::pair<std::int64_t, std::string>> curves;
        for (const auto& row : config.at("rows")) {
            if (!row.is_object()) {
                continue;
            }
            const auto value = [&row](const char* key) { return jsonNumber(row, key); };
            const std::int64_t runId = row.value("run_id", std::int64_t {0});
            const std::string verdict = row.value("verdict", std::string("-"));
            if (verdict == "breaks") {
                table.cellClass[{table.rows.size(), 8}] = "fail";
            } else if (verdict == "holds") {
                table.cellClass[{table.rows.size(), 8}] = "pass";
            }
            table.rows.push_back({row.value("objective", std::string("?")), row.value("configuration", std::string("?")),
                "#" + std::to_string(runId), number(value("mismatch")), number(value("bf16_multiple"), 3) + "x",
                number(value("quality")), percent(value("relative_change")), number(value("reward"), 3), verdict});
            if (store_.run(runId)) {
                curves.emplace_back(runId,
                    row.value("objective", std::string("?")) + " " + row.value("configuration", std::string("?")));
            }
        }
        addTable(table, "compare-objectives-" + id);
        if (!curves.empty()) {
            addPlot(curvesPlot(PlotRequest::Kind::MismatchCurves, curves), "compare-objectives-" + id, "Per-step mismatch of every run of the comparison "
                                                               "(log axis).");
        }
    }

    // A breakdown run's candidates (runId 0: breakdowns stored without a run): the GUI's stacked bars by Shapley
    // (add-one-in where a candidate has none) and every part of every method with its interval.
    void writeBreakdown(std::int64_t runId)
    {
        const std::string id = std::to_string(runId);
        beginSection(runId > 0 ? "Mismatch breakdown (run #" + id + ")" : "Mismatch breakdowns without a run");
        std::vector<store::BreakdownRecord> records;
        for (store::BreakdownRecord& record : store::breakdowns(store_)) {
            if (record.runId.value_or(0) == runId) {
                records.push_back(std::move(record));
            }
        }
        if (records.empty()) {
            paragraph("This breakdown stored no candidates (status of its run: "
                + (store_.run(runId) ? store::toString(store_.run(runId)->status) : std::string("unknown")) + ").");
            return;
        }
        paragraph("Each candidate's mismatch split by source: every source switched on and off on the same prompts "
                  "and seeds. The split depends on the order sources are switched on, so three are given: "
                  "add-one-in (the source alone on the BF16 engine), leave-one-out (the configuration without it) "
                  "and Shapley (the mean over every order; its parts add up to total - BF16 unit). The interaction "
                  "is (total - BF16 unit) - sum of the parts; a negative part is drawn below zero.");
        PlotRequest plot;
        plot.id = runId;
        plot.kind = PlotRequest::Kind::BreakdownBars;
        addPlot(plot, "breakdown-" + id,
            "Stacked: the BF16 unit, then each source's Shapley part (add-one-in where marked *) and the "
            "interaction; the diamond is the measured total with its 95% interval (nats/token).");
        plot.kind = PlotRequest::Kind::BreakdownShares;
        addPlot(plot, "breakdown-" + id + "-shares",
            "The same bars as percent of each candidate's total: its composition, comparable across candidates whose "
            "totals differ by orders of magnitude.");
        plot.kind = PlotRequest::Kind::BreakdownByProbability;
        addPlot(plot, "breakdown-" + id + "-by-probability",
            "Share of each whole configuration's summed KL by the engine's probability of the chosen token mu(y).",
            options_.plotHeight * 3 / 5);
        plot.kind = PlotRequest::Kind::BreakdownByEntropy;
        addPlot(plot, "breakdown-" + id + "-by-entropy",
            "Share of each whole configuration's summed KL by the trainer's entropy at the prefix (nats).",
            options_.plotHeight * 3 / 5);
        Table table {{"Candidate", "Source", "Add-one-in", "95% interval", "Leave-one-out", "95% interval", "Shapley",
                         "95% interval", "x BF16 (Shapley or add-one-in)"},
            {}, {}};
        const auto interval = [](const std::optional<double>& low, const std::optional<double>& high) {
            return low && high ? "[" + number(*low) + ", " + number(*high) + "]" : std::string("-");
        };
        for (const store::BreakdownRecord& r : records) {
            const auto multiple = [&](double value) {
                return r.bf16Unit > 0.0 ? number(value / r.bf16Unit, 3) + "x" : std::string("-");
            };
            table.rows.push_back({r.candidate, "total", number(r.total), interval(r.totalCiLow, r.totalCiHigh), "", "",
                "", "", multiple(r.total)});
            table.rows.push_back({r.candidate, "BF16 unit", number(r.bf16Unit), interval(r.unitCiLow, r.unitCiHigh),
                "", "", "", "", "1x"});
            std::vector<std::string> sources = r.sources;
            if (!sources.empty()) {
                sources.push_back("interaction");
            }
            for (const std::string& source : sources) {
                std::vector<std::string> row = {r.candidate, source};
                for (const char* method : {"add_one_in", "leave_one_out", "shapley"}) {
                    std::string value = "-", range = "-";
                    for (const auto& part : r.partsOf(method)) {
                        if (part.source == source) {
                            value = number(part.value);
                            range = interval(part.ciLow, part.ciHigh);
                        }
                    }
                    if (std::string(method) == "shapley" && source == "interaction" && r.shapley) {
                        value = "0";
                        range = "by construction";
                    }
                    row.push_back(value);
                    row.push_back(range);
                }
                std::string shown = "-";
                // The bars' part: Shapley, else add-one-in (a candidate with too many sources for Shapley).
                for (const auto& part : r.partsOf(r.shapley ? "shapley" : "add_one_in")) {
                    if (part.source == source) {
                        shown = multiple(part.value);
                    }
                }
                row.push_back(shown);
                table.rows.push_back(row);
            }
        }
        addTable(table, "breakdown-" + id);
        Table estimators {{"Candidate (whole configuration)", "full KL", "k1 (r / rho)", "k3 (r / rho)",
                              "mult_prob_error (r / rho)", "|mu - pi| (r / rho)"},
            {}, {}};
        for (const store::BreakdownRecord& r : records) {
            // The whole configuration: the subset with every source on.
            std::string all;
            for (const std::string& source : r.sources) {
                all += (all.empty() ? "" : "+") + source;
            }
            const store::BreakdownSubset* whole = r.subsetOf(all);
            if (!whole) {
                continue;
            }
            try {
                const metrics::EstimatorComparison comparison
                    = metrics::estimatorComparisonFromJson(nlohmann::json::parse(whole->estimatorsJson));
                std::vector<std::string> cells {r.candidate, number(comparison.kl)};
                for (const metrics::EstimatorSummary& e : comparison.estimators) {
                    cells.push_back(estimatorCell(e));
                }
                cells.resize(std::max(cells.size(), estimators.header.size()));
                estimators.rows.push_back(cells);
            } catch (const std::exception&) {
                // A record written without estimators: no row.
            }
        }
        if (!estimators.rows.empty()) {
            paragraph("The sampled-token estimators trainers log, beside the full-vocabulary KL of each whole "
                      "configuration: token mean and the Pearson / Spearman correlation with the per-token full KL "
                      "(k1 = log mu(y) - log pi(y); k3 = r - 1 - log r; mult_prob_error = exp|log pi(y) - log mu(y)|, "
                      "NeMo-RL's token_mult_prob_error; |mu - pi| of the sampled token).");
            addTable(estimators, "breakdown-" + id + "-estimators");
        }
    }

    void writeTimeToQuality(const store::RunInfo& run)
    {
        const std::string id = std::to_string(run.id);
        beginSection("Time to quality (run #" + id + ")");
        const auto config = nlohmann::json::parse(run.configJson, nullptr, false);
        if (!config.is_object() || !config.contains("result") || !config.at("result").is_object()) {
            paragraph("The comparison stored no result (status " + store::toString(run.status) + ").");
            return;
        }
        const auto& result = config.at("result");
        const auto value = jsonNumber;
        paragraph("Target: quality Q &le; " + number(value(result, "target_quality"))
            + " nats/token, the synchronous BF16 run's quality at step "
            + number(value(result, "target_step")) + ". Speedup (BF16 run's time / candidate's time): "
            + (value(result, "speedup") ? number(*value(result, "speedup"), 3) + "x" : std::string("none (a run did not reach the target after training)"))
            + ".");
        Table table {{"Run", "Configuration", "Reached at step", "Wall time to target (s)", "Best Q", "Total (s)"}, {},
            {}};
        std::vector<std::pair<std::int64_t, std::string>> curves;
        for (const char* which : {"baseline", "candidate"}) {
            if (!result.contains(which) || !result.at(which).is_object()) {
                continue;
            }
            const auto& r = result.at(which);
            const std::int64_t runId = r.value("run_id", std::int64_t {0});
            const std::string label = r.value("label", std::string(which));
            table.rows.push_back({"#" + std::to_string(runId), label,
                r.value("reached", false) ? number(value(r, "step")) : "not reached", number(value(r, "seconds"), 3),
                number(value(r, "best_quality")), number(value(r, "total_seconds"), 3)});
            if (store_.run(runId)) {
                curves.emplace_back(runId, label);
            }
        }
        addTable(table, "time-to-quality-" + id);
        if (!curves.empty()) {
            addPlot(curvesPlot(PlotRequest::Kind::QualityCurves, curves), "time-to-quality-" + id, "Quality Q (nats/token, lower is better) of both runs at "
                                                            "their evaluation points, by step.");
        }
    }

    static PlotRequest curvesPlot(PlotRequest::Kind kind, std::vector<std::pair<std::int64_t, std::string>> runs)
    {
        PlotRequest request;
        request.kind = kind;
        request.runs = std::move(runs);
        return request;
    }

    store::RunStore& store_;
    const ReportOptions& options_;
    Progress& progress_;
    PlotRenderer* renderer_;
    fs::path out_;
    std::string html_;
    ReportResult result_;
    int sectionIndex_ = 0;
};

std::mutex rendererMutex;
PlotRendererFactory installedFactory;

} // namespace

const char* const kNoPlotsNote = "This report has no plots: it was written by a build of Mismatch Lab without the "
                                 "GUI, whose views draw them (configure with MISMATCH_BUILD_GUI=ON for the plots). "
                                 "Every table and number is here.";

void installPlotRenderer(PlotRendererFactory factory)
{
    const std::lock_guard<std::mutex> lock(rendererMutex);
    installedFactory = std::move(factory);
}

std::unique_ptr<PlotRenderer> makeInstalledPlotRenderer()
{
    PlotRendererFactory factory;
    {
        const std::lock_guard<std::mutex> lock(rendererMutex);
        factory = installedFactory;
    }
    return factory ? factory() : nullptr;
}

nlohmann::json toJson(const ReportResult& result)
{
    nlohmann::json sections = nlohmann::json::array();
    for (const ReportSection& s : result.sections) {
        sections.push_back({{"title", s.title}, {"plots", s.plots}, {"tables", s.tables}});
    }
    return {{"index", result.indexPath}, {"sections", sections}, {"files", result.files},
        {"with_plots", result.withPlots}};
}

std::vector<store::RunInfo> resolveStudy(const store::RunStore& store, const std::string& study)
{
    if (study == "workspace" || study == "all") {
        return {};
    }
    return {store::findRun(store, study)};
}

ReportResult writeReport(store::RunStore& store, const ReportOptions& options, Progress& progress,
    PlotRenderer* renderer)
{
    if (options.outDirectory.empty()) {
        throw InputError("report", "", "expected the report's out directory");
    }
    progress.update(0.0, "reading the workspace");
    const std::vector<store::RunInfo> runs = resolveStudy(store, options.study);
    ReportWriter writer(store, options, progress, renderer);
    return writer.write(runs);
}

} // namespace mismatch::report
