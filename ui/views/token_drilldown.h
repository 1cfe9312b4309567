#pragma once
// Token drill-down (issue 21, item 2): one stored generation token by token, each token's background its per-token
// KL(mu || pi) (white 0 to dark red at the colour scale's maximum). Hovering (or clicking) a token shows its
// position, text, KL, mu(y) and pi(y) of the chosen token, both distributions' entropies and their top-5; buttons jump
// to the first divergence from the paired generation and through the tokens of largest KL; the generation is
// flagged when it repeats itself (a run of one n-gram, n <= 4, repeated at least 3 times in a row) or does not decode
// to valid UTF-8. Opened from the Prefix Shift tab (a stored pair's own and BF16 prefixes), the Admission tab (a
// decision's candidate generations) and the Runs tab (a training run's rollouts at a kept step).
#include "core/model/tokenizer.h"
#include "core/store/analysis_store.h"

#include <QColor>
#include <QDialog>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

class QComboBox;
class QLabel;
class QPushButton;
class QTextBrowser;

namespace mismatch::ui {

// White (0 nats) to dark red (`scaleMax`): a token's KL as its background.
QColor klColour(double kl, double scaleMax);
// The colour scale's maximum for these per-token KLs: their 99th percentile, so one outlier does not wash out the
// rest (1 when there are none; at least 1e-12).
double klColourScale(std::vector<double> kl);
// The token's bytes as text with a visible newline and space, HTML-escaped; "[id]" without a tokenizer.
QString visibleTokenText(const model::Tokenizer* tokenizer, std::int64_t id);

// A run of one n-gram repeated back to back: where it starts, n and how many times it occurs in a row.
struct Repetition {
    std::int64_t start = 0;
    std::int64_t length = 0; // n
    std::int64_t times = 0;
};
// The longest (in tokens covered) run of an n-gram (1 <= n <= maxN) repeated at least minTimes times in a row.
std::optional<Repetition> findRepetition(const std::vector<std::int64_t>& tokens, int maxN = 4, int minTimes = 3);
// Offset of the first byte of the decoded tokens that is not valid UTF-8 (npos: it decodes); nullopt without a
// tokenizer or when an id has no token.
std::optional<std::size_t> firstUndecodableByte(const model::Tokenizer* tokenizer, const std::vector<std::int64_t>& tokens);

class TokenDrillDown;

// Tokenizers of model directories, each read once (null when the directory has no readable tokenizer.json): a view
// that opens drill-downs keeps one, so that the tokenizer outlives the dialogs (their parent is the view).
class TokenizerCache {
public:
    const model::Tokenizer* forModel(const std::string& directory);

private:
    std::map<std::string, std::shared_ptr<const model::Tokenizer>> tokenizers_;
};

// A drill-down of stored generations, one sequence each titled by its prompt, on one colour scale over all of them
// (no paired generation, so no first divergence): shown, deleted on close. nullptr when there are none.
TokenDrillDown* showStoredGenerations(const model::Tokenizer* tokenizer, const QString& heading,
    std::vector<store::StoredGeneration> generations, QWidget* parent);

class TokenDrillDown : public QDialog {
    Q_OBJECT
public:
    struct Sequence {
        QString title; // "candidate engine (own prefixes)"
        std::vector<std::int64_t> tokens;
        std::vector<double> kl;
        std::vector<store::TokenDetail> details; // may be empty (stored before details were)
        std::optional<std::int64_t> firstDivergence;
    };

    // `tokenizer` may be null (tokens shown as ids); not owned, must outlive the dialog.
    TokenDrillDown(const model::Tokenizer* tokenizer, double colourScaleMax, QWidget* parent = nullptr);
    void setSequences(const QString& heading, std::vector<Sequence> sequences);
    void showSequence(int index);
    // Shows token `position` of the current sequence in the detail panel (and marks it).
    void selectToken(int position);
    // The first divergence of the current sequence (false when it has none).
    bool jumpToFirstDivergence();
    // The next token in decreasing KL order (wraps around).
    void jumpToNextLargest();

    int selectedToken() const { return selected_; }
    QString detailText() const;
    QString flagsText() const;
    QTextBrowser* tokenView() const { return tokens_; }

private:
    void render();

    const model::Tokenizer* tokenizer_;
    double scaleMax_;
    std::vector<Sequence> sequences_;
    int current_ = 0;
    int selected_ = -1;
    std::vector<int> largest_; // positions by decreasing KL
    int largestIndex_ = -1;
    QComboBox* sequenceBox_ = nullptr;
    QLabel* heading_ = nullptr;
    QLabel* flags_ = nullptr;
    QTextBrowser* tokens_ = nullptr;
    QLabel* detail_ = nullptr;
    QPushButton* firstDivergence_ = nullptr;
    QPushButton* largestButton_ = nullptr;
};

} // namespace mismatch::ui
