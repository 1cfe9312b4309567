// `mismatch report` in core (core/report/report.h), without the GUI and without a QApplication: on the fixture
// workspace (tests/common/analysis_fixture.h) a report written without a plot renderer has every section and table
// with the stored numbers (the fixture's values, written independently of the report), its CSV files quote as RFC
// 4180 does and end lines with CRLF, the page says that the plots are missing and shows none, and nothing is left
// under a temporary name; with a renderer, the report asks for exactly the plots the dashboard shows, in order, and
// shows only those the renderer wrote. The report job runs the same report from its spec.
#include "core/common/error.h"
#include "core/common/progress.h"
#include "core/jobs/job_file.h"
#include "core/jobs/report_job.h"
#include "core/report/report.h"
#include "core/store/run_store.h"
#include "tests/common/analysis_fixture.h"
#include "tests/common/test_main.h"

#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace mismatch;

namespace {

std::string readText(const std::string& path)
{
    std::ifstream in(path, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

bool contains(const std::string& text, const std::string& part)
{
    return text.find(part) != std::string::npos;
}

// Writes a small PNG-named file per request and records what was asked; declines calibration steps other than 120
// (as the budget view does for a step it does not list).
class RecordingRenderer : public report::PlotRenderer {
public:
    bool render(store::RunStore&, const report::PlotRequest& request, const std::string& path) override
    {
        requests.push_back(request);
        if (request.kind == report::PlotRequest::Kind::CalibrationStep && request.step != 120) {
            return false;
        }
        std::ofstream(path) << "plot";
        return true;
    }
    std::vector<report::PlotRequest> requests;
};

} // namespace

class TestReportTables : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QVERIFY(directory_.isValid());
        store_ = std::make_unique<store::RunStore>(
            store::RunStore::open(directory_.filePath("workspace.db").toStdString()));
        ids_ = fixture::build(*store_);
    }

    void workspaceReportWithoutPlots()
    {
        const std::string out = directory_.filePath("report").toStdString();
        report::ReportOptions options;
        options.outDirectory = out;
        Progress progress;
        const report::ReportResult result = report::writeReport(*store_, options, progress, nullptr);
        QVERIFY(!result.withPlots);
        QCOMPARE(result.indexPath, out + "/index.html");
        const std::string html = readText(out + "/index.html");
        QVERIFY(html.rfind("<!DOCTYPE html>", 0) == 0);
        QVERIFY(contains(html, "</body></html>"));
        // Said on the page, no figure, no plots directory.
        QVERIFY(contains(html, std::string("<div class=\"flag\">") + report::kNoPlotsNote + "</div>"));
        QVERIFY(!contains(html, "<img"));
        QVERIFY(!std::filesystem::exists(out + "/plots"));

        std::vector<std::string> titles;
        for (const auto& section : result.sections) {
            QVERIFY(section.plots.empty());
            titles.push_back(section.title);
            QVERIFY2(contains(html, "<h2>" + section.title + "</h2>"), section.title.c_str());
        }
        const std::vector<std::string> expected = {"Runs",
            "Calibration #" + std::to_string(ids_.calibration) + " noise sweep", "Admission decisions without a run",
            "Layer sensitivity scan #" + std::to_string(ids_.scan) + " (fp8_e4m3/block128)",
            "Prefix shift #" + std::to_string(ids_.prefixShift)};
        QCOMPARE(titles, expected);

        // Numbers with their intervals, as the fixture stored them: the bracket at step 120 and its threshold; x BF16
        // over the point's own unit (0.15 / 0.00021 = 714x); the failed point's change and interval; the borderline
        // candidate (0.052 / 0.00021 = 248x); the most sensitive cell (layer 0's down projection: 0.0004 x 3 x 2.5 x
        // 1.6 = 0.0048, interval +-20%); the prefix-shift total.
        QVERIFY(contains(html, "<tr><td class=\"num\">120</td><td class=\"num\">0.06</td><td class=\"num\">0.15</td>"
                               "<td class=\"num\">0.06</td></tr>"));
        QVERIFY(contains(html, "<td>opd-noise-0.05</td><td class=\"num\">120</td><td class=\"num\">0.15</td>"
                               "<td class=\"num\">0.18</td><td class=\"num\">714x</td>"));
        QVERIFY(contains(html, "<td class=\"num\">+27.0%</td><td class=\"num\">[0.0135, 0.0189]</td>"
                               "<td class=\"fail\">failed</td>"));
        QVERIFY(contains(html, "<td>fp8-w8a8-block</td><td>step-100</td><td class=\"num\">0.052</td>"
                               "<td class=\"num\">[0.041, 0.067]</td><td class=\"num\">0.06</td>"
                               "<td class=\"num\">248x</td><td class=\"borderline\">borderline</td>"));
        QVERIFY(contains(html, "<td class=\"num\">1</td><td class=\"num\">0</td><td>down</td>"
                               "<td class=\"num\">0.0048</td><td class=\"num\">[0.00384, 0.00576]</td>"));
        // The KV cells' own format beside the weights' (the scan's kv_format).
        QVERIFY(contains(html, "quantized to fp8_e4m3/block128 (its KV cache, in the kv cells, to fp8_per_token_head)"));
        QVERIFY(contains(html, "<td>total (own prefixes)</td><td class=\"num\">0.031</td>"
                               "<td class=\"num\">[0.024, 0.038]</td>"));

        // CSV: a header line, one line per row, CRLF line ends.
        const std::string runs = readText(out + "/tables/runs.csv");
        QVERIFY(runs.rfind("Run,Name,Kind,Status,Steps,Last mismatch,Started (UTC)\r\n", 0) == 0);
        QCOMPARE(static_cast<size_t>(std::count(runs.begin(), runs.end(), '\n')), store_->listRuns().size() + 1);
        QCOMPARE(std::count(runs.begin(), runs.end(), '\r'), std::count(runs.begin(), runs.end(), '\n'));
        QVERIFY(contains(runs, "\r\n#" + std::to_string(ids_.fp8Run) + ",opd-fp8-kv,train,"));
        // A field with a comma is quoted: the interval, and the notes of the decision measured under another protocol
        // against the flagged calibration (0.071 / 0.00021 = 338x).
        const std::string admission = readText(out + "/tables/admission-unlinked.csv");
        QVERIFY(admission.rfind(
                    "Candidate,Checkpoint,Mismatch,95% interval,Threshold,BF16 multiple,Decision,Seconds,Notes\r\n", 0)
            == 0);
        QVERIFY(contains(admission, "\r\nfp8-kv,step-100,0.011,\"[0.009, 0.013]\",0.06,52.4x,admit,95,\r\n"));
        QVERIFY2(contains(admission,
                     "\r\nfp8-w8a8-block,step-200,0.071,\"[0.064, 0.079]\",0.06,338x,reject,95,\"protocol differs from "
                     "the calibration's: temperature 0.7 (calibration: 1), max_tokens 64 (calibration: 32); "
                     "calibration flagged: non-monotone at step 120: "
                         + std::string(fixture::kFixtureFlagReason)
                         + "; threshold: no bracket at step 200: the nearest earlier one (step 120) is used\"\r\n"),
            admission.c_str());
        // Every file listed exists; nothing is left under a temporary name.
        for (const auto& file : result.files) {
            QVERIFY2(std::filesystem::is_regular_file(out + "/" + file), file.c_str());
        }
        QCOMPARE(result.files.back(), std::string("index.html"));
        for (const auto& entry : std::filesystem::recursive_directory_iterator(out)) {
            const std::string name = entry.path().filename().string();
            QVERIFY2(name.find(".tmp") == std::string::npos && name.front() != '.', name.c_str());
        }
        // Its JSON (the CLI's --json and the job's result).
        const nlohmann::json json = report::toJson(result);
        QCOMPARE(json.at("with_plots").get<bool>(), false);
        QCOMPARE(json.at("sections").size(), result.sections.size());
        QCOMPARE(json.at("files").size(), result.files.size());
    }

    // The plots the dashboard shows, asked for in order at the report's size; a plot the renderer declines is not
    // shown.
    void renderedPlotsAreShown()
    {
        const std::string out = directory_.filePath("with-plots").toStdString();
        report::ReportOptions options;
        options.outDirectory = out;
        options.plotWidth = 640;
        options.plotHeight = 400;
        Progress progress;
        RecordingRenderer renderer;
        const report::ReportResult result = report::writeReport(*store_, options, progress, &renderer);
        QVERIFY(result.withPlots);
        using Kind = report::PlotRequest::Kind;
        const std::vector<Kind> kinds = {Kind::CalibrationStep, Kind::CalibrationStep, Kind::MismatchCurves,
            Kind::QualityCurves, Kind::Admission, Kind::Sensitivity, Kind::PrefixShiftPositions,
            Kind::PrefixShiftDivergence, Kind::PrefixShiftPair};
        QCOMPARE(renderer.requests.size(), kinds.size());
        for (size_t i = 0; i < kinds.size(); ++i) {
            QVERIFY(renderer.requests[i].kind == kinds[i]);
            QCOMPARE(renderer.requests[i].width, 640);
        }
        QCOMPARE(renderer.requests[0].id, ids_.calibration);
        // The sweep's runs, one curve each: the baseline, fp8-kv, noise 0.02 (points at two steps), 0.05 and 0.08.
        QCOMPARE(renderer.requests[2].runs.size(), std::size_t(5));
        QVERIFY(!renderer.requests[4].runId); // the decisions stored without a run
        QCOMPARE(renderer.requests[4].height, std::max(400 * 3 / 5, 90 + 34 * 5)); // a row per decision
        QCOMPARE(renderer.requests[5].height, 400 * 6 / 5);
        QCOMPARE(renderer.requests[8].pair, 1); // the first pair that diverged
        const std::string html = readText(out + "/index.html");
        QVERIFY(!contains(html, report::kNoPlotsNote));
        // The declined step has no figure; the other eight are shown with their files.
        int shown = 0;
        for (const auto& section : result.sections) {
            for (const auto& plot : section.plots) {
                QVERIFY(contains(html, "<img src=\"" + plot + "\""));
                QVERIFY(std::filesystem::exists(out + "/" + plot));
                ++shown;
            }
        }
        QCOMPARE(shown, 8);
        QVERIFY(contains(html, "plots/calibration-" + std::to_string(ids_.calibration) + "-step-120.png"));
        const std::string stepFigure = "<img src=\"plots/calibration-" + std::to_string(ids_.calibration) + "-step-";
        size_t stepFigures = 0;
        for (size_t at = html.find(stepFigure); at != std::string::npos; at = html.find(stepFigure, at + 1)) {
            ++stepFigures;
        }
        QCOMPARE(stepFigures, std::size_t(1));
    }

    void runReportFromTheJob()
    {
        const std::string out = directory_.filePath("job-report").toStdString();
        jobs::JobSpec spec("report");
        spec.set("study", "opd-fp8-kv").set("out", out);
        QVERIFY(spec.validate().empty());
        Progress progress;
        const jobs::JobResult result = spec.run(*store_, progress);
        QCOMPARE(result.at("index").get<std::string>(), out + "/index.html");
        QCOMPARE(result.at("sections").size(), std::size_t(2)); // the run, its training section
        const std::string html = readText(out + "/index.html");
        QVERIFY(contains(html, "Report: run #" + std::to_string(ids_.fp8Run) + " opd-fp8-kv (train)"));
        for (int step : {0, 40, 80, 120}) { // the run's four evaluations
            QVERIFY(contains(html, "<tr><td class=\"num\">" + std::to_string(step) + "</td>"));
        }
        const std::string evaluations = readText(out + "/tables/run-" + std::to_string(ids_.fp8Run) + "-evaluations.csv");
        QCOMPARE(std::count(evaluations.begin(), evaluations.end(), '\n'), 5L);
    }

    // A job file (what `mismatch run` reads): the out directory is relative to the file.
    void reportFromAJobFile()
    {
        const std::string file = directory_.filePath("report.yaml").toStdString();
        std::ofstream(file) << "job: report\nstudy: workspace\nout: from-file\nwidth: 600\n";
        const jobs::JobFile job = jobs::loadJobFile(file);
        QCOMPARE(job.steps.size(), std::size_t(1));
        QCOMPARE(job.steps[0].spec.integer("width"), std::int64_t(600));
        Progress progress;
        const std::vector<jobs::JobResult> results = jobs::runJobFile(job, *store_, progress);
        const std::string index = directory_.filePath("from-file/index.html").toStdString();
        QCOMPARE(results.at(0).at("index").get<std::string>(), index);
        QVERIFY(std::filesystem::is_regular_file(index));
        QCOMPARE(results.at(0).at("with_plots").get<bool>(), false); // no renderer installed in this process
    }

    void cancelledReportWritesNoPage()
    {
        const std::string out = directory_.filePath("cancelled").toStdString();
        report::ReportOptions options;
        options.outDirectory = out;
        Progress progress;
        progress.cancel();
        QVERIFY_THROWS_EXCEPTION(CancelledError, report::writeReport(*store_, options, progress, nullptr));
        QVERIFY(!std::filesystem::exists(out + "/index.html"));
    }

    void unknownStudyIsRefused()
    {
        report::ReportOptions options;
        options.study = "no such run";
        options.outDirectory = directory_.filePath("unknown").toStdString();
        Progress progress;
        QVERIFY_THROWS_EXCEPTION(StoreError, report::writeReport(*store_, options, progress, nullptr));
        QVERIFY(!std::filesystem::exists(options.outDirectory));
    }

private:
    QTemporaryDir directory_;
    std::unique_ptr<store::RunStore> store_;
    fixture::Ids ids_;
};

MISMATCH_TEST_GUILESS_MAIN(TestReportTables)
#include "test_report_tables.moc"
