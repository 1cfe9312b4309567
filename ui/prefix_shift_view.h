#pragma once
// Prefix-shift viewer: an analysis's split of mismatch into a per-token part and a prefix-shift part, and its
// paired generations (candidate engine and BF16 engine, same prompt and seed) token by token, each token
// coloured by its KL(mu || pi) (nats), the first divergence marked; below, mismatch by response position
// (mean over the stored pairs, and the selected pair).
#include "core/store/run_store.h"

#include <QWidget>

#include <memory>
#include <vector>

class QComboBox;
class QCustomPlot;
class QLabel;
class QListWidget;
class QTextBrowser;

namespace mismatch::model {
class Tokenizer;
}

namespace mismatch::ui {

class PrefixShiftView : public QWidget {
    Q_OBJECT
public:
    explicit PrefixShiftView(QWidget* parent = nullptr);
    ~PrefixShiftView() override;

    void setStore(const store::RunStore* store);
    void refresh();
    bool selectAnalysis(std::int64_t id);
    void selectPair(int index);

    QCustomPlot* plot() const { return plot_; }
    QListWidget* pairList() const { return pairList_; }
    QString summaryText() const;
    QString tokenHtml() const;
    std::int64_t analysisId() const { return analysisId_; }
    // KL (nats) that maps to the darkest token colour: the 99th percentile of the analysis's token KLs.
    double colourScaleMax() const { return scaleMax_; }

private:
    void showAnalysis(int comboIndex);
    QString tokenText(std::int64_t id) const;
    QString tokensHtml(const std::vector<std::int64_t>& tokens, const std::vector<double>& kl,
        std::optional<std::int64_t> divergence) const;

    struct Data;
    std::unique_ptr<Data> data_;
    const store::RunStore* store_ = nullptr;
    std::int64_t analysisId_ = 0;
    double scaleMax_ = 1.0;
    QComboBox* analysisBox_ = nullptr;
    QLabel* summary_ = nullptr;
    QListWidget* pairList_ = nullptr;
    QTextBrowser* tokens_ = nullptr;
    QCustomPlot* plot_ = nullptr;
};

} // namespace mismatch::ui
