#pragma once
// Overlay of several runs for comparison: one curve per run of the chosen measure (full KL, k1, k3, BF16
// multiple, quality at evaluations) against the step, bound to the one y axis labelled with that measure. Follows the
// runs live like RunPlot; legend above the data (click to hide a run), crosshair read-out, zoom, double-click reset.
#include "core/store/run_store.h"

#include <QTimer>
#include <QWidget>

#include <map>
#include <vector>

class QCheckBox;
class QComboBox;
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
    PlotCrosshair* crosshair() const { return crosshair_; }
    Measure measure() const { return measure_; }
    int curveCount() const;
    int pointCount(std::int64_t runId) const;

    // Rescales and redraws now (the live path throttles through a timer); used for offscreen rendering.
    void replot();

private:
    void rebuild();
    void scheduleReplot();

    store::RunStore* store_ = nullptr;
    std::vector<std::pair<std::int64_t, QString>> runs_;
    std::map<std::int64_t, std::int64_t> cursors_;
    std::map<std::int64_t, int> graphOfRun_;
    Measure measure_ = FullKl;
    QComboBox* measureBox_ = nullptr;
    QCheckBox* logScale_ = nullptr;
    QLabel* hint_ = nullptr;
    QLabel* readout_ = nullptr;
    PlotCrosshair* crosshair_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QTimer replotTimer_;
};

} // namespace mismatch::ui
