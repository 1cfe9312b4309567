#pragma once
// Per-step measures of one run, tailing the store live. Top: mismatch (full-vocabulary KL, k1, k3, nats/token)
// with the multiple of the BF16 unit on the right axis. Bottom: quality Q (nats/token) and accuracy at the
// run's evaluation points. Replots on a throttled single-shot timer, never once per data point.
#include "core/store/run_store.h"

#include <QTimer>
#include <QWidget>

class QCustomPlot;
class QCPAxisRect;
class QLabel;

namespace mismatch::ui {

class RunPlot : public QWidget {
    Q_OBJECT
public:
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

    // Rescales and redraws now (the live path throttles through a timer); used for offscreen rendering.
    void replot();

private:
    void scheduleReplot();

    store::RunStore* store_ = nullptr;
    std::int64_t runId_ = 0;
    std::int64_t cursor_ = 0;
    QCustomPlot* plot_ = nullptr;
    QCPAxisRect* qualityRect_ = nullptr;
    QLabel* title_ = nullptr;
    QTimer replotTimer_;
    int replots_ = 0;
};

} // namespace mismatch::ui
