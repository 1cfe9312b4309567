#pragma once
// Admission decisions: each candidate rollout configuration (per student checkpoint) as its mismatch with the
// bootstrap interval, against the admission threshold; admit green, borderline amber, reject red. A picker chooses
// the stored admission check shown (one admit run, or the decisions stored without a run; the newest by default,
// every check on request), with one dashed line per threshold shown, their labels stacked so that none covers
// another. The mismatch axis is logarithmic by default (candidates span orders of magnitude; linear on request),
// with drag/wheel zoom, double-click to reset, the legend above the data and a read-out of the hovered candidate.
// Below the plot, where each shown decision's mismatch sits (MismatchProfile): its bars in its decision's colour (a
// shade per candidate, so that a dozen candidates never run out of colours); the legend names each candidate when
// all fit in its row, else each decision with its count, so that no entry is cut. The table lists every shown
// decision with its BF16 multiple, inputs and cost (CSV export); a decision measured under another protocol than
// its calibration's, or against a flagged calibration, is marked (a warning sign in the plot's row label and the
// Notes column). A decision's stored generations open in the token drill-down (the button, or a double-click on its
// row).
#include "core/store/run_store.h"
#include "ui/views/analysis_data.h"
#include "ui/views/token_drilldown.h"

#include <QWidget>

#include <optional>
#include <string>

class QCheckBox;
class QComboBox;
class QCPBars;
class QCPItemText;
class QCustomPlot;
class QPushButton;
class QLabel;
class QStandardItem;
class QStandardItemModel;
class QTableView;

namespace mismatch::ui {

class EmptyState;
class MismatchProfile;

class AdmissionView : public QWidget {
    Q_OBJECT
public:
    explicit AdmissionView(QWidget* parent = nullptr);

    void setStore(const store::RunStore* store);
    // Re-reads the decisions; the check shown is kept unless it was the newest (then the newest is shown).
    void refresh();
    // Shows the decisions of one admission check: the admit run `runId`, or (nullopt) the decisions stored without
    // a run. False (nothing shown) when the workspace has no such check.
    bool selectCheck(std::optional<std::int64_t> runId);
    // Shows every decision of every check.
    void showEveryCheck();
    void setRunFilter(std::optional<std::int64_t> runId) { selectCheck(runId); }

    // The checks, newest first, then "every check" when there are several. Data: the run id (qlonglong), 0 for the
    // decisions stored without a run, -1 for every check.
    QComboBox* checkBox() const { return checkBox_; }

    QCustomPlot* plot() const { return plot_; }
    QTableView* table() const { return table_; }
    QStandardItemModel* decisionModel() const { return model_; }
    const std::vector<AdmissionDecision>& decisions() const { return decisions_; }
    int thresholdLineCount() const { return static_cast<int>(thresholdLabels_.size()); }
    // One label per threshold line, left to right (placed after each layout so that no two overlap).
    const std::vector<QCPItemText*>& thresholdLabels() const { return thresholdLabels_; }
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
    // Shown instead of the plot while the workspace has no decision: what the tab will show and "Start Admission
    // Check...".
    EmptyState* emptyState() const { return emptyState_; }
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

signals:
    // The empty page's "Start Admission Check...": the check's dialog should open.
    void startRequested();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    void fillCheckBox();
    void showSelectedCheck();
    QList<QStandardItem*> tableRow(const AdmissionDecision& d) const;
    void plotDecisions();
    void drawThresholds();
    void placeThresholdLabels();
    void fitAxes();
    void showSummary();
    void fitView();
    void updateProfile();
    void styleProfile();
    void updateProfileLegend();
    // The shown decision's check, as the picker names it ("run 7", "no run"), when several checks are shown.
    QString checkSuffix(const AdmissionDecision& d) const;

    const store::RunStore* store_ = nullptr;
    std::vector<AdmissionDecision> all_; // every decision of the workspace
    std::vector<AdmissionDecision> decisions_; // those of the checks shown
    // Per profile series, in order: its name, decision word and whether it has bins by probability / by entropy.
    struct ProfileEntry {
        QString name;
        std::string decision;
        bool byProbability = false;
        bool byEntropy = false;
    };
    std::vector<ProfileEntry> profileEntries_;
    // The profile's drawn bars with their series, in order.
    std::vector<std::pair<QCPBars*, const ProfileEntry*>> profileBars() const;
    bool decisionLegend_ = false; // the profile's legend names decisions, not candidates
    bool severalChecks_ = false;
    QComboBox* checkBox_ = nullptr;
    QLabel* summary_ = nullptr;
    QLabel* readout_ = nullptr;
    QCheckBox* logScale_ = nullptr;
    double fitX_[2] = {0.0, 1.0};
    double fitY_[2] = {-0.6, 0.6};
    QCustomPlot* plot_ = nullptr;
    MismatchProfile* profile_ = nullptr;
    QStandardItemModel* model_ = nullptr;
    QTableView* table_ = nullptr;
    QPushButton* drillDown_ = nullptr;
    TokenizerCache tokenizers_; // per checkpoint, for the drill-down
    std::vector<QCPItemText*> thresholdLabels_;
    EmptyState* emptyState_ = nullptr;
};

QColor decisionColor(const std::string& decision);
// The decision's warnings: "protocol differs: FIELDS" and the calibration's flags, one per line ("" when none).
QString decisionNotes(const AdmissionDecision& decision);

} // namespace mismatch::ui
