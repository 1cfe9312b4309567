#pragma once
// Mismatch breakdowns (core/analysis/breakdown.h): per candidate a stacked bar of where its mismatch comes from -
// the BF16 unit at the bottom, then each source's part (weights, activations, KV cache, embedding/lm_head,
// staleness, noise) and the interaction remainder - with the total and its 95% interval as a marker beside the
// stack. Parts below zero (an interaction where the sources together do less than alone, a source that lowers the
// mismatch) are stacked downwards from zero, as they are: the bar then spans more than the total, and the marker
// shows where the sum lands. The split method (Shapley, add-one-in, leave-one-out; a candidate without Shapley parts
// shows add-one-in, marked) and the unit (nats/token, BF16 multiples or percent of each total) are chosen above the
// plot; hovering a candidate reads every part with its interval. The view opens in the first unit of those three in
// which every candidate's total is at least 5% of the largest (so that no bar is flattened to zero beside one far
// larger); once a unit is chosen (the list, or setUnit) it is kept. Below: the parts of every method with intervals,
// and the sampled-token estimators of each whole configuration beside the full KL with their correlations across
// tokens.
#include "core/metrics/estimators.h"
#include "core/store/breakdown_store.h"

#include <QWidget>

#include <cstdint>
#include <optional>
#include <vector>

class QComboBox;
class QCustomPlot;
class QLabel;
class QStandardItemModel;
class QTableView;

namespace mismatch::ui {

class EmptyState;
class MismatchProfile;

// "0.0041 (0.41 / 0.38)": an estimator's token mean with its Pearson / Spearman correlation with the full KL.
QString estimatorCell(const metrics::EstimatorSummary& estimator);
// "Sampled-token estimators over N tokens (token mean, r / rho with the per-token full KL): k1 ..., k3 ..., ...".
QString estimatorLine(const metrics::EstimatorComparison& comparison);

class BreakdownView : public QWidget {
    Q_OBJECT
public:
    explicit BreakdownView(QWidget* parent = nullptr);

    void setStore(const store::RunStore* store);
    void refresh();
    // Shows the breakdowns of one run (false when it has none).
    bool selectRun(std::int64_t runId);
    enum Method { Shapley, AddOneIn, LeaveOneOut };
    void setMethod(Method method);
    // The value axis: nats/token, multiples of each candidate's BF16 unit, or percent of each candidate's total
    // (the composition, readable side by side when totals differ by orders of magnitude).
    enum Unit { Nats, Bf16Multiples, ShareOfTotal };
    // Chooses the unit and keeps it from then on (the default unit is no longer chosen per run).
    void setUnit(Unit unit);
    Unit currentUnit() const;
    // The unit the view opens in for `records`: the first of nats/token, BF16 multiples and percent of the total in
    // which the smallest non-zero total is at least kSmallestShownShare of the largest (percent of the total always
    // is: every bar is 100%).
    static Unit readableUnit(const std::vector<store::BreakdownRecord>& records);
    static constexpr double kSmallestShownShare = 0.05;
    void setBf16Units(bool multiples) { setUnit(multiples ? Bf16Multiples : Nats); }

    QCustomPlot* plot() const { return plot_; }
    // Where each whole configuration's mismatch sits: grouped bars of the share of its summed KL per bin of the
    // engine's probability of the chosen token (or of the trainer's entropy), one bar per candidate.
    QCustomPlot* profilePlot() const { return profile_; }
    enum Profile { ByProbability, ByEntropy };
    void setProfile(Profile profile);
    QTableView* table() const { return table_; }
    QTableView* estimatorTable() const { return estimatorTable_; }
    QComboBox* runBox() const { return runBox_; }
    const std::vector<store::BreakdownRecord>& records() const { return records_; }
    // The segments drawn for candidate `index`, bottom-up per sign: (series name, value in the shown unit).
    std::vector<std::pair<QString, double>> segments(int index) const;
    QString readoutText() const;
    void hoverAt(const QPoint& pixel);

    // The series' colours, shared with the report.
    static QColor sourceColor(const QString& source);
    // The parts a candidate shows for `method` (Shapley falls back to add-one-in without Shapley parts).
    static std::vector<store::BreakdownPart> shownParts(const store::BreakdownRecord& record, Method method);
    // Shown instead of the plot while the workspace has no breakdown (and no imported run's estimators): what the
    // tab will show and "Start Mismatch Breakdown...".
    EmptyState* emptyState() const { return emptyState_; }

signals:
    // The empty page's "Start Mismatch Breakdown...": the breakdown's dialog should open.
    void startRequested();

private:
    void rebuild();
    // The pieces of rebuild(): the stacked bars (returns how many candidates fall back to add-one-in), the tables
    // below them and the summary line.
    struct Stacks;
    int plotStacks(Method method, Unit unit);
    Stacks stackValues(Method method, Unit unit);
    void drawStacks(const Stacks& stacks);
    void drawTotals(const Stacks& stacks);
    void fillPartTables(Method method);
    void appendImportedEstimators();
    void showSummary(int fallbacks);
    void rebuildProfile();
    void fitView();

    const store::RunStore* store_ = nullptr;
    std::vector<std::int64_t> runIds_;
    std::vector<store::BreakdownRecord> records_;
    QComboBox* runBox_ = nullptr;
    QComboBox* methodBox_ = nullptr;
    QComboBox* unitBox_ = nullptr;
    QComboBox* profileBox_ = nullptr;
    MismatchProfile* profileWidget_ = nullptr;
    QCustomPlot* profile_ = nullptr;
    QLabel* summary_ = nullptr;
    QLabel* readout_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QStandardItemModel* model_ = nullptr;
    QTableView* table_ = nullptr;
    QStandardItemModel* estimatorModel_ = nullptr;
    QTableView* estimatorTable_ = nullptr;
    std::vector<std::vector<std::pair<QString, double>>> segments_; // per candidate, as drawn
    double fitY_[2] = {0.0, 1.0};
    bool unitChosen_ = false; // by the list or setUnit: then kept, else readableUnit() of the run shown
    EmptyState* emptyState_ = nullptr;
};

} // namespace mismatch::ui
