#pragma once
// Overlay of several runs for comparison: one curve per run of the chosen measure (full KL, k1, k3, BF16
// multiple, quality at evaluations) against the step, bound to the one y axis labelled with that measure. Follows the
// runs live like RunPlot; legend above the data (click to hide a run), crosshair read-out, zoom, double-click reset.
// A calibration's budget (its admission threshold at one bracket step, chosen in budgetBox()) is drawn across the
// runs as a dashed line with its label when the measure is the full-vocabulary KL, the statistic budgets and
// screens are measured with; the other measures say why it is not drawn.
#include "core/store/run_store.h"

#include <QTimer>
#include <QWidget>

#include <map>
#include <optional>
#include <vector>

class QCheckBox;
class QComboBox;
class QCPItemStraightLine;
class QCPItemText;
class QCustomPlot;
class QLabel;

namespace mismatch::ui {

class PlotCrosshair;

class ComparePlot : public QWidget {
    Q_OBJECT
public:
    enum Measure { FullKl, K1, K3, Bf16Multiple, Quality };

    explicit ComparePlot(QWidget* parent = nullptr);

    void setStore(store::RunStore* store);
    // Runs to overlay, with their display names.
    void setRuns(const std::vector<std::pair<std::int64_t, QString>>& runs);
    void setMeasure(Measure measure);
    // Reads what was committed since the last call.
    void tail();

    QCustomPlot* plot() const { return plot_; }
    QCheckBox* logScaleBox() const { return logScale_; }
    QComboBox* budgetBox() const { return budgetBox_; }
    // Chooses the budget of calibration `calibrationId` at bracket `step` (0: none); false when budgetBox() does not
    // offer it.
    bool setBudget(std::int64_t calibrationId, std::int64_t step);
    // The budget drawn now (nats/token): nullopt when none is chosen or the measure is not the full KL.
    std::optional<double> budgetThreshold() const;
    QCPItemStraightLine* budgetLine() const { return budgetLine_; }
    QCPItemText* budgetLabel() const { return budgetLabel_; }
    PlotCrosshair* crosshair() const { return crosshair_; }
    Measure measure() const { return measure_; }
    int curveCount() const;
    int pointCount(std::int64_t runId) const;

    // Rescales and redraws now (the live path throttles through a timer); used for offscreen rendering.
    void replot();

private:
    void rebuild();
    void scheduleReplot();
    void drawBudget();

    store::RunStore* store_ = nullptr;
    std::vector<std::pair<std::int64_t, QString>> runs_;
    std::map<std::int64_t, std::int64_t> cursors_;
    std::map<std::int64_t, int> graphOfRun_;
    Measure measure_ = FullKl;
    QComboBox* measureBox_ = nullptr;
    QCheckBox* logScale_ = nullptr;
    QComboBox* budgetBox_ = nullptr;
    QLabel* budgetNote_ = nullptr; // why no line is drawn for the chosen budget
    QCPItemStraightLine* budgetLine_ = nullptr;
    QCPItemText* budgetLabel_ = nullptr;
    QLabel* hint_ = nullptr;
    QLabel* readout_ = nullptr;
    PlotCrosshair* crosshair_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QTimer replotTimer_;
};

} // namespace mismatch::ui
