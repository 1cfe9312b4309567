// `mismatch report` (core/report/report.h) with the GUI's plots (ui/plots/report_plots.h) on the fixture workspace,
// offscreen: the page names every analysis, its plots are real renderings of the GUI's views (PNG files that load,
// at the report's size, not blank), its tables carry the stored numbers with their intervals (the fixture's values,
// written independently of the report), studies resolve by id and by name with clear errors otherwise, a cancelled
// report writes no page, and an unwritable out directory is an InputError naming it. The workspace report's plots
// are copied to the test-output directory for looking at.
#include "core/common/error.h"
#include "core/common/progress.h"
#include "core/report/report.h"
#include "core/store/run_store.h"
#include "fixture_workspace.h"
#include "tests/common/test_main.h"
#include "ui/views/budget_view.h"
#include "ui/plots/report_plots.h"
#include "ui/views/sensitivity_view.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QFile>
#include <QImage>
#include <QSet>
#include <QTemporaryDir>
#include <QtTest>

#include <fstream>
#include <sstream>

using namespace mismatch;

namespace {

std::string readText(const QString& path)
{
    std::ifstream in(path.toStdString());
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

// Distinct colours in a sample grid of the image: a blank or single-colour rendering has one or two.
int distinctColours(const QImage& image)
{
    QSet<QRgb> colours;
    for (int y = 0; y < image.height(); y += 3) {
        for (int x = 0; x < image.width(); x += 3) {
            colours.insert(image.pixel(x, y));
        }
    }
    return colours.size();
}

} // namespace

class TestReport : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        QVERIFY(directory_.isValid());
        store_ = std::make_unique<store::RunStore>(
            store::RunStore::open(directory_.filePath("workspace.db").toStdString()));
        ids_ = fixture::build(*store_);
    }

    void workspaceReport()
    {
        const QString out = directory_.filePath("report");
        report::ReportOptions options;
        options.study = "workspace";
        options.outDirectory = out.toStdString();
        Progress progress;
        const report::ReportResult result = report::writeReport(*store_, options, progress, &renderer_);
        QCOMPARE(QString::fromStdString(result.indexPath), QDir(out).absoluteFilePath("index.html"));
        QVERIFY(result.withPlots);
        const std::string html = readText(out + "/index.html");
        QVERIFY(html.rfind("<!DOCTYPE html>", 0) == 0);
        QVERIFY(html.find(report::kNoPlotsNote) == std::string::npos);
        QVERIFY(html.find("</body></html>") != std::string::npos);

        // Every analysis of the fixture has its section.
        std::vector<std::string> titles;
        for (const auto& section : result.sections) {
            titles.push_back(section.title);
            QVERIFY2(html.find(section.title) != std::string::npos, section.title.c_str());
        }
        const auto hasTitle = [&](const std::string& prefix) {
            return std::any_of(titles.begin(), titles.end(), [&](const auto& t) { return t.rfind(prefix, 0) == 0; });
        };
        QVERIFY(hasTitle("Runs"));
        QVERIFY(hasTitle("Calibration #" + std::to_string(ids_.calibration) + " noise sweep"));
        QVERIFY(hasTitle("Admission decisions without a run"));
        QVERIFY(hasTitle("Layer sensitivity scan #" + std::to_string(ids_.scan) + " (fp8_e4m3/block128)"));
        QVERIFY(hasTitle("Prefix shift #" + std::to_string(ids_.prefixShift)));

        // Plots: real renderings at twice the report's size.
        int plots = 0;
        for (const auto& section : result.sections) {
            for (const auto& plot : section.plots) {
                const QString path = out + "/" + QString::fromStdString(plot);
                QImage image(path);
                QVERIFY2(!image.isNull(), qPrintable(path));
                QCOMPARE(image.width(), 2 * options.plotWidth);
                QVERIFY2(distinctColours(image) > 20, qPrintable(path));
                QVERIFY2(html.find("<img src=\"" + plot + "\"") != std::string::npos, plot.c_str());
                QVERIFY(QFile::permissions(path) & QFileDevice::ReadOther);
                ++plots;
                QFile::remove(fixture::screenshotPath("report_" + QFileInfo(path).fileName()));
                QFile::copy(path, fixture::screenshotPath("report_" + QFileInfo(path).fileName()));
            }
        }
        // Calibration (the one bracket step and the step with one point: 2) and its sweep curves (mismatch and
        // quality), admission, sensitivity, prefix shift (by position, the divergence histogram and the token pair).
        QCOMPARE(plots, 2 + 2 + 1 + 1 + 3);

        // Numbers with their intervals, as the fixture stored them.
        QVERIFY(html.find("<tr><td class=\"num\">120</td><td class=\"num\">0.06</td><td class=\"num\">0.15</td>"
                          "<td class=\"num\">0.06</td></tr>")
            != std::string::npos); // bracket at step 120 and its threshold
        // The training mean beside the screen statistic (1.2 x 0.15); x BF16 over the point's own unit: 0.15 /
        // 0.00021 = 714x.
        QVERIFY(html.find("<td>opd-noise-0.05</td><td class=\"num\">120</td><td class=\"num\">0.15</td>"
                          "<td class=\"num\">0.18</td><td class=\"num\">714x</td>")
            != std::string::npos);
        QVERIFY(html.find("<td class=\"num\">+27.0%</td><td class=\"num\">[0.0135, 0.0189]</td>"
                          "<td class=\"fail\">failed</td>")
            != std::string::npos);
        QVERIFY(html.find("<td>fp8-w8a8-block</td><td>step-100</td><td class=\"num\">0.052</td>"
                          "<td class=\"num\">[0.041, 0.067]</td><td class=\"num\">0.06</td><td class=\"num\">248x</td>"
                          "<td class=\"borderline\">borderline</td>")
            != std::string::npos);
        // The most sensitive cell: layer 0's down projection, 0.0004 x 3 (edge layer) x 2.5 (down) x 1.6.
        QVERIFY(html.find("<td class=\"num\">1</td><td class=\"num\">0</td><td>down</td><td class=\"num\">0.0048</td>"
                          "<td class=\"num\">[0.00384, 0.00576]</td>")
            != std::string::npos);
        QVERIFY(html.find("<td>total (own prefixes)</td><td class=\"num\">0.031</td><td class=\"num\">[0.024, "
                          "0.038]</td>")
            != std::string::npos);

        // Tables also as CSV: the runs table has a header and one line per run.
        const std::string runs = readText(out + "/tables/runs.csv");
        QCOMPARE(static_cast<size_t>(std::count(runs.begin(), runs.end(), '\n')), store_->listRuns().size() + 1);
        for (const auto& file : result.files) {
            QVERIFY2(QFile::exists(out + "/" + QString::fromStdString(file)), file.c_str());
        }
        // No temporary file is left behind.
        QCOMPARE(QDir(out + "/plots").entryList(QStringList {".*.png"}, QDir::Files | QDir::Hidden).size(), 0);
    }

    void runReport()
    {
        const QString out = directory_.filePath("run-report");
        report::ReportOptions options;
        options.study = "opd-fp8-kv";
        options.outDirectory = out.toStdString();
        Progress progress;
        const report::ReportResult result = report::writeReport(*store_, options, progress, &renderer_);
        const std::string html = readText(out + "/index.html");
        QVERIFY(html.find("Report: run #" + std::to_string(ids_.fp8Run) + " opd-fp8-kv (train)") != std::string::npos);
        QCOMPARE(result.sections.size(), size_t {2});
        QCOMPARE(result.sections[1].plots.size(), size_t {1});
        QImage image(out + "/" + QString::fromStdString(result.sections[1].plots[0]));
        QVERIFY(!image.isNull());
        QVERIFY(distinctColours(image) > 20);
        // The four evaluations of the run (steps 0, 40, 80, 120).
        for (int step : {0, 40, 80, 120}) {
            QVERIFY(html.find("<tr><td class=\"num\">" + std::to_string(step) + "</td>") != std::string::npos);
        }
        // By id: the same run.
        options.study = std::to_string(ids_.fp8Run);
        options.outDirectory = directory_.filePath("run-report-id").toStdString();
        QCOMPARE(report::writeReport(*store_, options, progress, &renderer_).sections.size(), size_t {2});
    }

    void studyResolution()
    {
        QVERIFY(report::resolveStudy(*store_, "workspace").empty());
        QVERIFY(report::resolveStudy(*store_, "all").empty());
        QCOMPARE(report::resolveStudy(*store_, "opd-bf16-baseline").at(0).id, ids_.baselineRun);
        // store::findRun's rule: an id, or a name that names one run (StoreError naming the workspace otherwise).
        try {
            report::resolveStudy(*store_, "999999");
            QFAIL("an unknown id was accepted");
        } catch (const StoreError& error) {
            QVERIFY(std::string(error.what()).find("no run with id 999999") != std::string::npos);
        }
        try {
            report::resolveStudy(*store_, "no such run");
            QFAIL("an unknown name was accepted");
        } catch (const StoreError& error) {
            QVERIFY(std::string(error.what()).find("no run named 'no such run'") != std::string::npos);
        }
        const std::int64_t twin = store_->beginRun({"opd-fp8-kv", "train", "{}", std::nullopt});
        store_->finishRun(twin, store::RunStatus::Finished);
        try {
            report::resolveStudy(*store_, "opd-fp8-kv");
            QFAIL("an ambiguous name was accepted");
        } catch (const StoreError& error) {
            const std::string expected = "(ids " + std::to_string(ids_.fp8Run) + ", " + std::to_string(twin) + ")";
            QVERIFY2(std::string(error.what()).find(expected) != std::string::npos, error.what());
        }
    }

    void cancelledReportWritesNoPage()
    {
        const QString out = directory_.filePath("cancelled");
        report::ReportOptions options;
        options.outDirectory = out.toStdString();
        Progress progress;
        progress.cancel();
        QVERIFY_THROWS_EXCEPTION(CancelledError, report::writeReport(*store_, options, progress, &renderer_));
        QVERIFY(!QFile::exists(out + "/index.html"));
    }

    void unwritableOutDirectory()
    {
        const QString file = directory_.filePath("a-file");
        QFile touch(file);
        QVERIFY(touch.open(QIODevice::WriteOnly));
        touch.close();
        report::ReportOptions options;
        options.outDirectory = (file + "/report").toStdString();
        Progress progress;
        try {
            report::writeReport(*store_, options, progress, &renderer_);
            QFAIL("a report under a regular file was written");
        } catch (const InputError& error) {
            QVERIFY2(std::string(error.what()).find(options.outDirectory) != std::string::npos, error.what());
        }
    }

    // The budget plot's mismatch axis is logarithmic by default (the sweep spans three decades) and linear on
    // request; the heatmap's colour scale likewise.
    void logarithmicScales()
    {
        ui::BudgetView budget;
        budget.setStore(store_.get());
        QVERIFY(budget.selectCalibration(ids_.calibration, 120));
        QCOMPARE(budget.plot()->xAxis->scaleType(), QCPAxis::stLogarithmic);
        QVERIFY(budget.plot()->xAxis->range().lower > 0.0);
        QVERIFY(budget.plot()->xAxis->range().lower < 0.00021); // the baseline point is inside
        budget.logScaleBox()->setChecked(false);
        QCOMPARE(budget.plot()->xAxis->scaleType(), QCPAxis::stLinear);

        ui::SensitivityView heatmap;
        heatmap.setStore(store_.get());
        QVERIFY(heatmap.selectScan(ids_.scan));
        QVERIFY(heatmap.logarithmic());
        QCOMPARE(heatmap.colorMap()->dataScaleType(), QCPAxis::stLogarithmic);
        // Smallest cell 0.0004 (layer 1, q), largest 0.0048.
        QCOMPARE(heatmap.colorMap()->dataRange().lower, 0.0004);
        QCOMPARE(heatmap.colorMap()->dataRange().upper, 0.0048);
        heatmap.logScaleBox()->setChecked(false);
        QVERIFY(!heatmap.logarithmic());
        QCOMPARE(heatmap.colorMap()->dataScaleType(), QCPAxis::stLinear);
        QCOMPARE(heatmap.colorMap()->dataRange().lower, 0.0);
    }

private:
    QTemporaryDir directory_;
    std::unique_ptr<store::RunStore> store_;
    fixture::Ids ids_;
    ui::ReportPlotRenderer renderer_; // the GUI's views
};

MISMATCH_TEST_MAIN(TestReport)
#include "test_report.moc"
