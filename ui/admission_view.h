#pragma once
// Admission decisions: each candidate rollout configuration (per student checkpoint) as its mismatch with the
// bootstrap interval, against the admission threshold; admit green, borderline amber, reject red. The table
// below lists every decision with its inputs and cost (CSV export).
#include "core/store/run_store.h"
#include "ui/analysis_data.h"

#include <QWidget>

#include <optional>

class QCustomPlot;
class QLabel;
class QStandardItemModel;
class QTableView;

namespace mismatch::ui {

class AdmissionView : public QWidget {
    Q_OBJECT
public:
    explicit AdmissionView(QWidget* parent = nullptr);

    void setStore(const store::RunStore* store);
    void refresh();
    // Shows only the decisions of one admission run (nullopt: every decision of the workspace).
    void setRunFilter(std::optional<std::int64_t> runId);

    QCustomPlot* plot() const { return plot_; }
    QTableView* table() const { return table_; }
    QStandardItemModel* decisionModel() const { return model_; }
    const std::vector<AdmissionDecision>& decisions() const { return decisions_; }
    int thresholdLineCount() const { return thresholdLines_; }

private:
    const store::RunStore* store_ = nullptr;
    std::vector<AdmissionDecision> decisions_;
    std::optional<std::int64_t> runFilter_;
    QLabel* summary_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QStandardItemModel* model_ = nullptr;
    QTableView* table_ = nullptr;
    int thresholdLines_ = 0;
};

QColor decisionColor(const std::string& decision);

} // namespace mismatch::ui
