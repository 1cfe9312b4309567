#pragma once
// Admission decisions: each candidate rollout configuration (per student checkpoint) as its mismatch with the
// bootstrap interval, against the admission threshold; admit green, borderline amber, reject red. The mismatch
// axis is logarithmic by default (candidates span orders of magnitude; linear on request), with drag/wheel zoom,
// double-click to reset, the legend above the data and a read-out of the hovered candidate. The table below lists
// every decision with its BF16 multiple, inputs and cost (CSV export); a decision measured under another protocol
// than its calibration's, or against a flagged calibration, is marked (a warning sign in the plot's row label and
// the Notes column). A decision's stored generations open in the token drill-down (the button, or a double-click on
// its row).
#include "core/store/run_store.h"
#include "ui/views/analysis_data.h"
#include "ui/views/token_drilldown.h"

#include <QWidget>

#include <optional>
#include <string>

class QCheckBox;
class QCustomPlot;
class QPushButton;
class QLabel;
class QStandardItemModel;
class QTableView;

namespace mismatch::ui {

class MismatchProfile;

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
    QCheckBox* logScaleBox() const { return logScale_; }
    // Where the mismatch sits, for the selected decisions (all when none is selected).
    MismatchProfile* profile() const { return profile_; }
    QString readoutText() const;
    // The read-out of the decision nearest to `pixel` (what hovering there shows).
    void hoverAt(const QPoint& pixel);
    // The token drill-down of decision `row` (its candidate's generations stored token by token: `admit
    // --store-generations`); null when the decision has none (stored before they were kept, or with 0).
    TokenDrillDown* openDrillDown(int row);
    QPushButton* drillDownButton() const { return drillDown_; }
    enum Column {
        Candidate,
        Checkpoint,
        Mismatch,
        Interval,
        Threshold,
        Bf16Multiple,
        Decision,
        Notes,
        Seconds,
        ToolVersion,
        DecidedAt,
        Estimators,
        ColumnCount
    };

private:
    void fitView();
    void updateProfile();

    const store::RunStore* store_ = nullptr;
    std::vector<AdmissionDecision> decisions_;
    std::optional<std::int64_t> runFilter_;
    QLabel* summary_ = nullptr;
    QLabel* readout_ = nullptr;
    QCheckBox* logScale_ = nullptr;
    double fitX_[2] = {0.0, 1.0};
    QCustomPlot* plot_ = nullptr;
    MismatchProfile* profile_ = nullptr;
    QStandardItemModel* model_ = nullptr;
    QTableView* table_ = nullptr;
    QPushButton* drillDown_ = nullptr;
    TokenizerCache tokenizers_; // per checkpoint, for the drill-down
    int thresholdLines_ = 0;
};

QColor decisionColor(const std::string& decision);
// The decision's warnings: "protocol differs: FIELDS" and the calibration's flags, one per line ("" when none).
QString decisionNotes(const AdmissionDecision& decision);

} // namespace mismatch::ui
