#pragma once
// Prefix-shift viewer: an analysis's split of mismatch into a per-token part and a prefix-shift part, computed over
// every analysed pair (the stored details), and the paired generations it kept (candidate engine and BF16 engine,
// same prompt and seed) token by token, each token coloured by its KL(mu || pi) (nats), the first divergence
// marked. Below: mismatch by response position over all analysed pairs (total on the candidate's own prefixes,
// per-token on the BF16 engine's, and the BF16 unit), with the selected pair dotted; the histogram of first
// divergences; and the TIS/MIS corrections' effect on each part. An analysis stored without details (an older
// workspace) falls back to the mean over its stored pairs and says so.
#include "core/store/run_store.h"

#include <QWidget>

#include <nlohmann/json_fwd.hpp>

#include <memory>
#include <optional>
#include <vector>

class QComboBox;
class QCustomPlot;
class QLabel;
class QListWidget;
class QPushButton;
class QStandardItemModel;
class QTableView;
class QTextBrowser;

namespace mismatch::model {
class Tokenizer;
}
namespace mismatch::store {
struct PrefixShiftRecord;
}

namespace mismatch::ui {

class EmptyState;
class MismatchProfile;

class PlotCrosshair;
class TokenDrillDown;

class PrefixShiftView : public QWidget {
    Q_OBJECT
public:
    // Graph indices of plot().
    enum Graph { MeanCandidate, MeanReference, Bf16UnitByPosition, PairCandidate, PairReference };

    explicit PrefixShiftView(QWidget* parent = nullptr);
    ~PrefixShiftView() override;

    void setStore(const store::RunStore* store);
    void refresh();
    bool selectAnalysis(std::int64_t id);
    void selectPair(int index);

    QCustomPlot* plot() const { return plot_; }
    // First divergences: bars over response positions (one QCPBars).
    QCustomPlot* histogramPlot() const { return histogram_; }
    // Where the candidate's mismatch sits (by mu(y) or the trainer's entropy).
    MismatchProfile* profile() const { return profile_; }
    QStandardItemModel* correctionModel() const { return corrections_; }
    QTableView* correctionTable() const { return correctionTable_; }
    QListWidget* pairList() const { return pairList_; }
    // Opens the token drill-down of stored pair `index` (nullptr when there is none); it deletes itself on close.
    TokenDrillDown* openDrillDown(int index);
    QString summaryText() const;
    QString tokenHtml() const;
    std::int64_t analysisId() const { return analysisId_; }
    // True when the by-position curves come from every analysed pair (the stored details), false when from the
    // stored pairs only.
    bool positionsFromAllPairs() const { return fromAllPairs_; }
    // KL (nats) that maps to the darkest token colour: the 99th percentile of the analysis's token KLs.
    double colourScaleMax() const { return scaleMax_; }
    // Shown instead of the plots while the workspace has no analysis: what the tab will show and "Start
    // Prefix-Shift Analysis...".
    EmptyState* emptyState() const { return emptyState_; }

signals:
    // The empty page's "Start Prefix-Shift Analysis...": the analysis's dialog should open.
    void startRequested();

private:
    // Lays the view out as the empty page and `page` (the view's widgets).
    void createEmptyState(QWidget* page);
    void showAnalysis(int comboIndex);
    // The pieces of showAnalysis(): empty the plots and the corrections, then fill the summary, the by-position
    // plot, the first-divergence histogram, the corrections and the pair list from the analysis `r` and its
    // stored `details`.
    void clearAnalysis();
    void showSummary(const store::PrefixShiftRecord& r, const nlohmann::json& details);
    void plotPositions(const store::PrefixShiftRecord& r, const nlohmann::json& details);
    void plotDivergences(const store::PrefixShiftRecord& r, const nlohmann::json& details);
    void fillCorrections(const nlohmann::json& details);
    // Lists the stored pairs and selects the first diverging one; pairList_'s signals are blocked by the caller.
    void listPairs();
    void fitPositions();
    void fitHistogram();
    QString tokenText(std::int64_t id) const;
    QString tokensHtml(const std::vector<std::int64_t>& tokens, const std::vector<double>& kl,
        std::optional<std::int64_t> divergence) const;

    struct Data;
    std::unique_ptr<Data> data_;
    const store::RunStore* store_ = nullptr;
    std::int64_t analysisId_ = 0;
    double scaleMax_ = 1.0;
    bool fromAllPairs_ = false;
    QComboBox* analysisBox_ = nullptr;
    QLabel* summary_ = nullptr;
    QLabel* readout_ = nullptr;
    QListWidget* pairList_ = nullptr;
    QPushButton* drillDown_ = nullptr;
    QTextBrowser* tokens_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QCustomPlot* histogram_ = nullptr;
    MismatchProfile* profile_ = nullptr;
    QStandardItemModel* corrections_ = nullptr;
    QTableView* correctionTable_ = nullptr;
    PlotCrosshair* crosshair_ = nullptr;
    EmptyState* emptyState_ = nullptr;
};

} // namespace mismatch::ui
