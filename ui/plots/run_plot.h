#pragma once
// Per-step measures of one run, tailing the store live. Top: the full-vocabulary KL(mu || pi) (nats/token), the
// primary series that sets the value range; k1 and k3 (sampled-token estimators, noisy and sometimes negative) can
// be switched on; the right axis reads the same curve in multiples of the run's BF16 unit (right = left / unit, so
// both axes put zero at the same height) and carries the stored BF16 multiple. Bottom: quality Q (nats/token) and
// accuracy (%) at the run's evaluation points, both axes from zero; the panels share the step axis, numbered on the
// bottom one, and each is at least as tall as its axis titles. The legend sits above the data (click an entry
// to hide or show its series), a crosshair reads out the values under the mouse, drag/wheel zoom, double-click
// resets; an optional moving average smooths the mismatch series (the raw points stay, faded). A training run's
// rollouts kept token by token (step 1, its evaluation steps, the last) open in the token drill-down. A run that stores
// no per-step measures (an admission check, a scan) shows where its results are instead of empty axes. Replots on a
// throttled single-shot timer, never once per data point.
// Beside the run, a student's budget (a stored calibration's bracket at one step, chosen in budgetControls() or by
// the import dialog's "Budget from:", remembered per run for the plot's lifetime): a dashed line at its admission
// threshold on the mismatch axis only (the series in nats/token that it is compared with; never the quality panel),
// the bracket [largest passing, smallest failing] as a band behind the data, the steps above it ringed, and a label
// naming the calibration, the step and how many of the run's steps lie above it. Redrawn with every replot, so a
// followed run keeps it as its steps arrive.
#include "core/store/run_store.h"
#include "ui/views/token_drilldown.h"

#include <QTimer>
#include <QVector>
#include <QWidget>

#include <map>
#include <optional>

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QCPAxis;
class QCPAxisRect;
class QCPRange;
class QCPItemRect;
class QCPItemText;
class QLabel;
class QPushButton;
class QStackedWidget;

namespace mismatch::ui {

class PlotCrosshair;
class TokenDrillDown;

class RunPlot : public QWidget {
    Q_OBJECT
public:
    // Graph indices of plot(): the stored series, then the smoothed copies of the first three (unnamed), then the
    // budget's line (named "budget", so that the crosshair reads it; not in the legend) and the rings of the steps
    // above it (unnamed).
    enum Graph {
        FullKl,
        K1,
        K3,
        Bf16Multiple,
        Quality,
        Accuracy,
        SmoothedKl,
        SmoothedK1,
        SmoothedK3,
        Budget,
        AboveBudget
    };

    explicit RunPlot(QWidget* parent = nullptr);

    void setStore(store::RunStore* store);
    // Shows run `runId` (0 clears).
    void showRun(std::int64_t runId, const QString& title);
    // Reads steps and evaluations committed since the last call and schedules a replot.
    void tail();
    QCustomPlot* plot() const { return plot_; }
    std::int64_t runId() const { return runId_; }
    int pointCount() const;
    int bf16MultipleCount() const;
    int evaluationCount() const;
    int replotCount() const { return replots_; }
    QCheckBox* k1Box() const { return k1Box_; }
    QCheckBox* k3Box() const { return k3Box_; }
    // Moving-average window in steps: 0 (off), 5, 11 or 25.
    QComboBox* smoothingBox() const { return smoothing_; }
    PlotCrosshair* crosshair() const { return crosshair_; }
    // The axis each measure is read on (what its label says).
    QCPAxis* mismatchAxis() const;
    QCPAxis* multipleAxis() const;
    QCPAxis* qualityAxis() const;
    QCPAxis* accuracyAxis() const;
    // The BF16 unit the right axis divides by (median of the run's KL / BF16 multiple), when the run has one.
    std::optional<double> axisUnit() const { return axisUnit_; }
    // The steps whose rollouts the run kept token by token (step 1, its evaluation steps, the last), and the
    // Token Drill-Down button that opens the chosen one's.
    QComboBox* rolloutStepBox() const { return rolloutStep_; }
    QPushButton* drillDownButton() const { return drillDown_; }
    // Opens the drill-down of the run's kept rollouts at `step` (nullptr when it kept none there).
    TokenDrillDown* openDrillDown(std::int64_t step);
    // The budget beside the run: "Budget beside the run:" and its list (none, or a calibration's bracket at a step).
    // In the plot's top row; the main window moves it into its plot tabs' corner, where the row has room.
    QWidget* budgetControls() const { return budgetControls_; }
    QComboBox* budgetBox() const { return budgetBox_; }
    // Draws the admission threshold of calibration `calibrationId`'s bracket at `step` (store::admissionThreshold)
    // beside run `runId` whenever that run is shown, for the plot's lifetime (calibrationId 0: none). False, and
    // nothing changed, when the workspace has no such bracket or nothing passed there.
    bool setRunBudget(std::int64_t runId, std::int64_t calibrationId, std::int64_t step);
    // Re-reads the calibrations that budgetBox() offers (a calibration stored since), keeping the choice.
    void reloadBudgets();
    // The shown run's budget as drawn: the threshold (nats/token; the Budget graph's value), the bracket's band
    // (hidden without both ends), the label, and how many points of the series it is compared with lie above it.
    std::optional<double> budgetThreshold() const;
    QCPItemRect* budgetBracket() const { return budgetBracket_; }
    QCPItemText* budgetLabel() const { return budgetLabel_; }
    int stepsAboveBudget() const;
    // True while the run has no per-step measures and the message replaces the plot.
    bool showingMessage() const;
    QString messageText() const;

    // Rescales and redraws now (the live path throttles through a timer); used for offscreen rendering and as the
    // double-click reset.
    void replot();

signals:
    // "Show results" of a run without per-step measures: the tab for `kind` should show run `runId`.
    void openResults(const QString& kind, std::int64_t runId);

private:
    // The budget's list, for the top row (budgetControls()).
    QWidget* makeBudgetControls();
    // The budget's graphs (Budget, AboveBudget: after the smoothed copies), its band and its label.
    void addBudgetGraphs();
    // The two panels one above the other: their data areas aligned, each at least as tall as its value axes' titles,
    // the plot as tall as the panels then need.
    void layOutPanels();
    void scheduleReplot();
    void updateSmoothing();
    void updateMessage();
    void updateRolloutSteps();
    // The shown run's remembered budget, read from the store into budget_ and selected in budgetBox().
    void applyRunBudget();
    // The budget's line over the step axis `steps` and the run's steps, the band, the rings and the label; the line
    // and the band's lower end are in the mismatch axis' range, which replot() sets after this.
    void drawBudget(const QCPRange& steps);
    // Places the label above the line's right end, or below it where the line is near the top of the panel.
    void placeBudgetLabel();

    store::RunStore* store_ = nullptr;
    std::int64_t runId_ = 0;
    std::int64_t cursor_ = 0;
    int resumes_ = -1; // the run's resumes when its steps were read (-1: none read yet)
    QString kind_;
    QString status_;
    bool defaultsChosen_ = false; // k1/k3 shown by default only for runs without a full-vocabulary KL
    std::optional<double> axisUnit_;
    QStackedWidget* stack_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QCPAxisRect* qualityRect_ = nullptr;
    QLabel* title_ = nullptr;
    QLabel* readout_ = nullptr;
    QLabel* message_ = nullptr;
    QPushButton* openButton_ = nullptr;
    QCheckBox* k1Box_ = nullptr;
    QCheckBox* k3Box_ = nullptr;
    QComboBox* smoothing_ = nullptr;
    QComboBox* rolloutStep_ = nullptr;
    QPushButton* drillDown_ = nullptr;
    TokenizerCache tokenizers_; // the run's student's, for the drill-down
    PlotCrosshair* crosshair_ = nullptr;
    // The budget: the choice per run (calibration id, bracket step) and the shown run's, as read from the store.
    struct ShownBudget {
        std::int64_t calibrationId = 0;
        std::int64_t step = 0;
        double threshold = 0.0; // nats per token
        std::optional<double> largestPassing;
        std::optional<double> smallestFailing;
    };
    std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> runBudgets_;
    std::optional<ShownBudget> budget_;
    QWidget* budgetControls_ = nullptr;
    QComboBox* budgetBox_ = nullptr;
    QCPItemRect* budgetBracket_ = nullptr;
    QCPItemText* budgetLabel_ = nullptr;
    QTimer replotTimer_;
    int replots_ = 0;
};

// Centered moving average of `values` over `window` points (shrinking at the ends); `window` <= 1 copies.
QVector<double> movingAverage(const QVector<double>& values, int window);

} // namespace mismatch::ui
