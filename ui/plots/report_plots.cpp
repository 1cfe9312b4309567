#include "ui/plots/report_plots.h"

#include "core/common/error.h"
#include "ui/views/admission_view.h"
#include "ui/views/breakdown_view.h"
#include "ui/views/budget_view.h"
#include "ui/plots/compare_plot.h"
#include "ui/plots/plot_export.h"
#include "ui/views/prefix_shift_view.h"
#include "ui/plots/run_plot.h"
#include "ui/views/sensitivity_view.h"

#include <qcustomplot.h>

#include <QApplication>
#include <QCheckBox>
#include <QImage>
#include <QPainter>
#include <QTemporaryFile>
#include <QTextDocument>
#include <QThread>

#include <cmath>
#include <exception>
#include <filesystem>
#include <memory>

namespace mismatch::ui {

namespace fs = std::filesystem;

namespace {

using Kind = report::PlotRequest::Kind;

// Renders `plot` at `width` x `height` (twice its pixels) to `path`.
bool savePlot(QCustomPlot* plot, int width, int height, const std::string& path)
{
    plot->resize(width, height);
    plot->replot();
    const QString error = exportPlot(plot, QString::fromStdString(path));
    if (!error.isEmpty()) {
        throw InputError(path, "", error.toStdString());
    }
    return true;
}

// Rich text (the prefix-shift viewer's token view) rendered to PNG at `width` and twice its pixels.
bool saveHtmlImage(const QString& html, int width, const std::string& path)
{
    QTextDocument document;
    document.setHtml(html);
    document.setTextWidth(width);
    const int height = static_cast<int>(std::ceil(document.size().height()));
    QImage image(QSize(width * 2, height * 2), QImage::Format_ARGB32);
    image.setDevicePixelRatio(2.0);
    image.fill(Qt::white);
    {
        QPainter painter(&image);
        document.drawContents(&painter);
    }
    const fs::path target(path);
    QTemporaryFile temporary(QString::fromStdString(target.parent_path().string()) + "/."
        + QString::fromStdString(target.stem().string()) + ".XXXXXX.png");
    if (!temporary.open() || !image.save(&temporary, "PNG") || !temporary.flush()) {
        throw InputError(path, "", "cannot write the image: " + temporary.errorString().toStdString());
    }
    temporary.close();
    std::error_code error;
    fs::rename(temporary.fileName().toStdString(), path, error);
    if (error) {
        throw InputError(path, "", "cannot rename the image into place: " + error.message());
    }
    temporary.setAutoRemove(false);
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read
            | fs::perms::others_read, error);
    return true;
}

bool saveCurves(store::RunStore& store, const report::PlotRequest& request, const std::string& path)
{
    std::vector<std::pair<std::int64_t, QString>> runs;
    for (const auto& [id, label] : request.runs) {
        runs.emplace_back(id, QString::fromStdString(label));
    }
    ComparePlot compare;
    compare.setStore(&store);
    compare.setRuns(runs);
    const bool mismatch = request.kind == Kind::MismatchCurves;
    compare.setMeasure(mismatch ? ComparePlot::FullKl : ComparePlot::Quality);
    compare.logScaleBox()->setChecked(mismatch);
    compare.tail();
    compare.replot();
    return savePlot(compare.plot(), request.width, request.height, path);
}

bool saveBreakdown(store::RunStore& store, const report::PlotRequest& request, const std::string& path)
{
    BreakdownView view;
    view.setStore(&store);
    if (!view.selectRun(request.id)) {
        return false;
    }
    view.setMethod(BreakdownView::Shapley);
    switch (request.kind) {
    case Kind::BreakdownBars:
        view.setUnit(BreakdownView::Nats); // the report's caption says nats/token, whatever the view would open in
        return savePlot(view.plot(), request.width, request.height, path);
    case Kind::BreakdownShares:
        view.setUnit(BreakdownView::ShareOfTotal);
        return savePlot(view.plot(), request.width, request.height, path);
    case Kind::BreakdownByProbability:
        view.setProfile(BreakdownView::ByProbability);
        return savePlot(view.profilePlot(), request.width, request.height, path);
    default:
        view.setProfile(BreakdownView::ByEntropy);
        return savePlot(view.profilePlot(), request.width, request.height, path);
    }
}

bool savePrefixShift(store::RunStore& store, const report::PlotRequest& request, const std::string& path)
{
    PrefixShiftView view;
    view.setStore(&store);
    if (!view.selectAnalysis(request.id)) {
        return false;
    }
    switch (request.kind) {
    case Kind::PrefixShiftPositions: return savePlot(view.plot(), request.width, request.height, path);
    case Kind::PrefixShiftDivergence: return savePlot(view.histogramPlot(), request.width, request.height, path);
    default: view.selectPair(request.pair); return saveHtmlImage(view.tokenHtml(), request.width, path);
    }
}

bool draw(store::RunStore& store, const report::PlotRequest& request, const std::string& path)
{
    switch (request.kind) {
    case Kind::CalibrationStep: {
        BudgetView budget;
        budget.setStore(&store);
        return budget.selectCalibration(request.id, request.step)
            && savePlot(budget.plot(), request.width, request.height, path);
    }
    case Kind::MismatchCurves:
    case Kind::QualityCurves: return saveCurves(store, request, path);
    case Kind::TrainingRun: {
        RunPlot view;
        view.setStore(&store);
        view.showRun(request.id, QString::fromStdString(request.runName));
        view.tail();
        view.replot();
        return savePlot(view.plot(), request.width, request.height, path);
    }
    case Kind::Admission: {
        AdmissionView view;
        view.setStore(&store);
        view.setRunFilter(request.runId);
        return savePlot(view.plot(), request.width, request.height, path);
    }
    case Kind::Sensitivity: {
        SensitivityView view;
        view.setStore(&store);
        return view.selectScan(request.id) && savePlot(view.plot(), request.width, request.height, path);
    }
    case Kind::PrefixShiftPositions:
    case Kind::PrefixShiftDivergence:
    case Kind::PrefixShiftPair: return savePrefixShift(store, request, path);
    case Kind::BreakdownBars:
    case Kind::BreakdownShares:
    case Kind::BreakdownByProbability:
    case Kind::BreakdownByEntropy: return saveBreakdown(store, request, path);
    }
    return false;
}

// The renderer of a process that had no application object: it makes one (offscreen: the views need no display)
// for the report's duration.
class OwningRenderer : public ReportPlotRenderer {
public:
    OwningRenderer()
    {
        qputenv("QT_QPA_PLATFORM", "offscreen");
        application_ = std::make_unique<QApplication>(argc_, argv_);
    }

private:
    int argc_ = 1;
    char name_[9] = "mismatch";
    char* argv_[2] = {name_, nullptr};
    std::unique_ptr<QApplication> application_;
};

} // namespace

bool ReportPlotRenderer::render(store::RunStore& store, const report::PlotRequest& request, const std::string& path)
{
    QCoreApplication* application = QCoreApplication::instance();
    if (!application || QThread::currentThread() == application->thread()) {
        return draw(store, request, path);
    }
    // Widgets live on the application's thread: draw there and wait.
    bool drawn = false;
    std::exception_ptr failure;
    QMetaObject::invokeMethod(
        application,
        [&] {
            try {
                drawn = draw(store, request, path);
            } catch (...) {
                failure = std::current_exception();
            }
        },
        Qt::BlockingQueuedConnection);
    if (failure) {
        std::rethrow_exception(failure);
    }
    return drawn;
}

void installReportPlots()
{
    report::installPlotRenderer([]() -> std::unique_ptr<report::PlotRenderer> {
        if (!QCoreApplication::instance()) {
            return std::make_unique<OwningRenderer>();
        }
        if (!qobject_cast<QApplication*>(QCoreApplication::instance())) {
            throw Error("the report's plots are drawn with widgets, but this program runs a Qt application without "
                        "them (a QCoreApplication); run the `mismatch` binary instead");
        }
        return std::make_unique<ReportPlotRenderer>();
    });
}

} // namespace mismatch::ui
