#pragma once
// Per-step mismatch of one run (full-vocabulary KL, k1, k3), tailing the store live. Replots on a throttled
// single-shot timer, never once per data point.
#include "core/store/run_store.h"

#include <QTimer>
#include <QWidget>

class QCustomPlot;
class QLabel;

namespace mismatch::ui {

class RunPlot : public QWidget {
    Q_OBJECT
public:
    explicit RunPlot(QWidget* parent = nullptr);

    void setStore(store::RunStore* store);
    // Shows run `runId` (0 clears).
    void showRun(std::int64_t runId, const QString& title);
    // Reads steps committed since the last call and schedules a replot.
    void tail();
    QCustomPlot* plot() const { return plot_; }
    std::int64_t runId() const { return runId_; }
    int pointCount() const;

private:
    void scheduleReplot();
    void replot();

    store::RunStore* store_ = nullptr;
    std::int64_t runId_ = 0;
    std::int64_t cursor_ = 0;
    QCustomPlot* plot_ = nullptr;
    QLabel* title_ = nullptr;
    QTimer replotTimer_;
};

}  // namespace mismatch::ui
