// The token drill-down (ui/views/token_drilldown.h) of a stored prefix-shift pair: repetition and UTF-8 flags on known
// sequences, the detail panel (mu, pi, entropies, top-5) of a hovered token, the jumps to the first divergence and
// to the largest-KL tokens, and that the Prefix Shift tab, the admission table and a training run's kept step (Runs
// tab) open it. Screenshots at 1x, and at 2x when run with
// QT_SCALE_FACTOR=2 (test_token_drilldown_2x).
#include "core/common/error.h"
#include "core/store/analysis_store.h"
#include "fixture_workspace.h"
#include "tests/common/test_main.h"
#include "ui/views/admission_view.h"
#include "ui/views/prefix_shift_view.h"
#include "ui/plots/run_plot.h"
#include "ui/views/token_drilldown.h"

#include <QComboBox>
#include <QLabel>
#include <QListWidget>
#include <QPushButton>
#include <QTemporaryDir>
#include <QTextBrowser>
#include <QtTest>
#include <QTableView>

#include <nlohmann/json.hpp>

#include <cmath>

using namespace mismatch;

namespace {

const std::string kStudent = MISMATCH_SOURCE_DIR "/resources/models/arith-student";

store::TokenDetail tokenDetail(std::int64_t chosen, double mu, double pi, std::int64_t other)
{
    store::TokenDetail d;
    d.logMu = std::log(mu);
    d.logPi = std::log(pi);
    d.entropyMu = 0.31;
    d.entropyPi = 0.47;
    d.topMu = {{chosen, mu}, {other, 1.0 - mu - 0.01}, {other + 1, 0.004}, {other + 2, 0.003}, {other + 3, 0.002}};
    d.topPi = {{other, 1.0 - pi - 0.01}, {chosen, pi}, {other + 1, 0.005}, {other + 2, 0.003}, {other + 3, 0.001}};
    return d;
}

// Stored generations of `responses` to one arithmetic prompt: a KL spike at token 4, details with mu(y) 0.8 and
// pi(y) 0.6.
std::vector<store::StoredGeneration> storedGenerations(
    const model::Tokenizer& tokenizer, const std::vector<std::string>& responses, const std::string& idPrefix)
{
    std::vector<store::StoredGeneration> generations;
    for (const std::string& response : responses) {
        store::StoredGeneration generation;
        generation.index = static_cast<std::int64_t>(generations.size());
        generation.promptId = idPrefix + std::to_string(generation.index + 1);
        generation.promptTokens = tokenizer.encode("Q:(13-6)*3-1\n");
        generation.tokens = tokenizer.encode(response);
        for (std::size_t i = 0; i < generation.tokens.size(); ++i) {
            generation.kl.push_back(i == 4 ? 0.19 : 0.002 + 0.001 * static_cast<double>(i % 3));
            generation.details.push_back(tokenDetail(generation.tokens[i], 0.8, 0.6, 40 + static_cast<std::int64_t>(i)));
        }
        generations.push_back(generation);
    }
    return generations;
}

} // namespace

class TestTokenDrillDown : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        fixture::initGuiTest();
        QVERIFY(directory_.isValid());
        scale_ = qEnvironmentVariable("QT_SCALE_FACTOR", QStringLiteral("1")).toDouble();
        tokenizer_.emplace(model::Tokenizer::fromFile(kStudent + "/tokenizer.json"));
    }

    void repetitionIsFound()
    {
        QVERIFY(!ui::findRepetition({1, 2, 3, 4, 5, 6}).has_value());
        QVERIFY(!ui::findRepetition({7, 7, 1, 7, 7}).has_value()); // twice in a row only
        const auto single = ui::findRepetition({1, 9, 9, 9, 9, 2});
        QVERIFY(single.has_value());
        QCOMPARE(single->start, std::int64_t(1));
        QCOMPARE(single->length, std::int64_t(1));
        QCOMPARE(single->times, std::int64_t(4));
        // "3+4;" three times: the longest run covered wins over the shorter repeats inside it.
        const auto gram = ui::findRepetition({0, 3, 1, 4, 2, 3, 1, 4, 2, 3, 1, 4, 2, 5});
        QVERIFY(gram.has_value());
        QCOMPARE(gram->start, std::int64_t(1));
        QCOMPARE(gram->length, std::int64_t(4));
        QCOMPARE(gram->times, std::int64_t(3));
    }

    void undecodableBytesAreFound()
    {
        const std::vector<std::int64_t> text = tokenizer_->encode("21\n");
        QCOMPARE(*ui::firstUndecodableByte(&*tokenizer_, text), std::string::npos);
        // The token of the lone byte 0xff (no UTF-8 sequence starts with it).
        std::optional<std::int64_t> ff;
        for (std::int64_t id = 0; id < tokenizer_->vocabSize(); ++id) {
            try {
                if (tokenizer_->tokenBytes(id) == std::string("\xff")) {
                    ff = id;
                }
            } catch (const std::exception&) {
            }
        }
        QVERIFY(ff.has_value());
        std::vector<std::int64_t> bad = text;
        bad.push_back(*ff);
        QCOMPARE(*ui::firstUndecodableByte(&*tokenizer_, bad), std::size_t(3));
        QVERIFY(!ui::firstUndecodableByte(nullptr, bad).has_value());
    }

    void drillDownFromThePrefixShiftTab()
    {
        store::RunStore store = store::RunStore::open(directory_.filePath("workspace.db").toStdString());
        store::PrefixShiftPair pair;
        pair.promptId = "arith-probe-0001";
        pair.promptTokens = tokenizer_->encode("Q:(13-6)*3-1\n");
        pair.candidateTokens = tokenizer_->encode("7*3=21;21-1=20;20;20;20;A:20\n");
        pair.referenceTokens = tokenizer_->encode("7*3=21;21-1=20;A:20\n");
        pair.firstDivergence = 15;
        for (std::size_t i = 0; i < pair.candidateTokens.size(); ++i) {
            pair.candidateKl.push_back(i == 15 ? 0.21 : i == 20 ? 0.12 : 0.002 + 0.001 * static_cast<double>(i % 4));
            pair.candidateDetail.push_back(tokenDetail(pair.candidateTokens[i], 0.8, 0.6, 40 + static_cast<std::int64_t>(i)));
        }
        for (std::size_t i = 0; i < pair.referenceTokens.size(); ++i) {
            pair.referenceKl.push_back(0.003);
            pair.referenceDetail.push_back(tokenDetail(pair.referenceTokens[i], 0.9, 0.85, 60));
        }
        store::PrefixShiftRecord record;
        record.model = kStudent;
        record.total = 0.03;
        record.perToken = 0.01;
        record.prefixShift = 0.02;
        record.bf16Unit = 1e-4;
        record.pairs = 1;
        record.diverged = 1;
        const std::int64_t id = store::addPrefixShift(store, record, {pair});
        // The details come back as written.
        const auto back = store::prefixShiftPairs(store, id);
        QCOMPARE(back.size(), std::size_t(1));
        QCOMPARE(back[0].candidateDetail.size(), pair.candidateTokens.size());
        QCOMPARE(back[0].candidateDetail[3].logMu, pair.candidateDetail[3].logMu);
        QVERIFY(back[0].candidateDetail[3].topPi == pair.candidateDetail[3].topPi);

        ui::PrefixShiftView view;
        view.resize(1100, 800);
        view.setStore(&store);
        QVERIFY(view.selectAnalysis(id));
        view.pairList()->setCurrentRow(0);
        QPointer<ui::TokenDrillDown> dialog = view.openDrillDown(0);
        QVERIFY(dialog);
        QVERIFY(QTest::qWaitForWindowExposed(dialog));
        // The candidate repeats "20;" three times in a row: flagged; it decodes.
        QVERIFY2(dialog->flagsText().contains(QLatin1String("repetition: 3 token(s) from position 12 repeated 4 times")),
            qPrintable(dialog->flagsText()));
        QVERIFY(!dialog->flagsText().contains(QLatin1String("not decodable")));
        QVERIFY(dialog->jumpToFirstDivergence());
        QCOMPARE(dialog->selectedToken(), 15);
        QVERIFY2(dialog->detailText().contains(QLatin1String("first divergence")), qPrintable(dialog->detailText()));
        // Largest KL first: position 15 (0.21), then 20 (0.12).
        dialog->jumpToNextLargest();
        QCOMPARE(dialog->selectedToken(), 15);
        dialog->jumpToNextLargest();
        QCOMPARE(dialog->selectedToken(), 20);
        // Hovering a token's anchor shows its details: mu(y) = 0.8, pi(y) = 0.6, both entropies and the top-5.
        emit dialog->tokenView()->highlighted(QUrl(QStringLiteral("tok:3")));
        QCOMPARE(dialog->selectedToken(), 3);
        const QString text = dialog->detailText();
        QVERIFY2(text.contains(QLatin1String("mu(y) = 0.8")) && text.contains(QLatin1String("pi(y) = 0.6")), qPrintable(text));
        QVERIFY2(text.contains(QLatin1String("top-5 mu")) && text.contains(QLatin1String("0.47")), qPrintable(text));
        const QString prefix = scale_ > 1.0 ? QStringLiteral("high_dpi_token_drilldown") : QStringLiteral("token_drilldown");
        dialog->resize(1000, 560);
        fixture::saveScreenshot(*dialog, prefix + QStringLiteral(".png"));
        QCOMPARE(dialog->grab().devicePixelRatio(), scale_);
        dialog->showSequence(1);
        QVERIFY2(dialog->flagsText().startsWith(QLatin1String("No repetition")), qPrintable(dialog->flagsText()));
        dialog->close();
        QTRY_VERIFY(dialog.isNull()); // deletes itself on close
        // Without stored details (a pair from before schema 5) the panel says how to get them.
        store::PrefixShiftPair old = pair;
        old.candidateDetail.clear();
        old.referenceDetail.clear();
        const std::int64_t oldId = store::addPrefixShift(store, record, {old});
        view.refresh();
        QVERIFY(view.selectAnalysis(oldId));
        QPointer<ui::TokenDrillDown> plain = view.openDrillDown(0);
        QVERIFY(plain);
        plain->selectToken(0);
        QVERIFY(plain->detailText().contains(QLatin1String("without per-token details")));
        plain->close();
    }

    void drillDownFromTheAdmissionTable()
    {
        store::RunStore store = store::RunStore::open(directory_.filePath("admission.db").toStdString());
        store::AdmissionDecision decision;
        decision.candidateJson = R"({"name": "fp8-kv"})";
        decision.checkpoint = kStudent; // its tokenizer shows the tokens as text
        decision.mismatch = 0.011;
        decision.ciLow = 0.009;
        decision.ciHigh = 0.013;
        decision.threshold = 0.05;
        decision.decision = "admit";
        decision.seconds = 12.0;
        decision.generations
            = storedGenerations(*tokenizer_, {"7*3=21;21-1=20;20;20;20;A:20\n", "8+5=13;A:13\n"}, "arith-probe-000");
        // A generation whose KL values do not match its tokens is refused, and nothing of the decision is written.
        store::AdmissionDecision broken = decision;
        broken.generations[1].kl.pop_back();
        QVERIFY_THROWS_EXCEPTION(StoreError, store::addAdmissionDecision(store, broken));
        QVERIFY(store::admissionDecisions(store).empty());
        const std::int64_t id = store::addAdmissionDecision(store, decision);
        store::AdmissionDecision without = decision; // as stored with --store-generations 0, or before schema 7
        without.generations.clear();
        store::addAdmissionDecision(store, without);
        // The generations come back as written; admissionDecisions does not load them.
        const auto back = store::admissionGenerations(store, id);
        QCOMPARE(back.size(), std::size_t(2));
        QCOMPARE(back[1].promptId, std::string("arith-probe-0002"));
        QCOMPARE(back[0].tokens, decision.generations[0].tokens);
        QCOMPARE(back[0].kl, decision.generations[0].kl);
        QVERIFY(back[0].details[4].topMu == decision.generations[0].details[4].topMu);
        QVERIFY(store::admissionDecisions(store)[0].generations.empty());

        ui::AdmissionView view;
        view.resize(1000, 600);
        view.setStore(&store);
        view.show();
        QVERIFY(QTest::qWaitForWindowExposed(&view));
        QVERIFY(!view.drillDownButton()->isEnabled()); // nothing selected
        view.table()->selectRow(1);
        QVERIFY(!view.drillDownButton()->isEnabled()); // no generations stored with it
        QVERIFY(view.openDrillDown(1) == nullptr);
        view.table()->selectRow(0);
        QVERIFY(view.drillDownButton()->isEnabled());
        QPointer<ui::TokenDrillDown> dialog = view.openDrillDown(0);
        QVERIFY(dialog);
        QVERIFY(QTest::qWaitForWindowExposed(dialog));
        QVERIFY2(dialog->flagsText().contains(QLatin1String("repetition: 3 token(s) from position 12 repeated 4 times")),
            qPrintable(dialog->flagsText()));
        QVERIFY(!dialog->jumpToFirstDivergence()); // no paired generation
        dialog->jumpToNextLargest();
        QCOMPARE(dialog->selectedToken(), 4);
        const QString text = dialog->detailText();
        QVERIFY2(text.contains(QLatin1String("mu(y) = 0.8")) && text.contains(QLatin1String("pi(y) = 0.6")), qPrintable(text));
        const QString prefix = scale_ > 1.0 ? QStringLiteral("high_dpi_token_drilldown") : QStringLiteral("token_drilldown");
        dialog->resize(1000, 560);
        fixture::saveScreenshot(*dialog, prefix + QStringLiteral("_admission.png"));
        dialog->showSequence(1);
        QVERIFY2(dialog->flagsText().startsWith(QLatin1String("No repetition")), qPrintable(dialog->flagsText()));
        dialog->close();
        QTRY_VERIFY(dialog.isNull());
    }

    // A training run's rollouts kept at steps 1 and 3 (store::addStepGenerations, in the step's transaction as the
    // trainer writes them): the Runs tab's plot lists those steps, newest chosen, and opens the chosen step's
    // rollouts with the run's student tokenizer.
    void drillDownFromATrainingRunsStep()
    {
        store::RunStore store = store::RunStore::open(directory_.filePath("train.db").toStdString());
        store::RunSpec spec;
        spec.name = "opd fp8-kv";
        spec.configJson = nlohmann::json {{"student", kStudent}}.dump();
        const std::int64_t runId = store.beginRun(spec);
        std::vector<store::StepMetrics> steps(3);
        for (std::size_t i = 0; i < steps.size(); ++i) {
            steps[i].step = static_cast<std::int64_t>(i + 1);
            steps[i].mismatchKl = 0.01 + 0.002 * static_cast<double>(i);
        }
        store.appendSteps(runId, steps);
        store::addStepGenerations(store, runId, 1, storedGenerations(*tokenizer_, {"8+5=13;A:13\n"}, "arith-train-"));
        store::addStepGenerations(
            store, runId, 3, storedGenerations(*tokenizer_, {"7*3=21;21-1=20;20;20;20;A:20\n", "8+5=13;A:13\n"}, "arith-train-"));
        // A run that does not exist, or a generation whose lengths disagree: refused, nothing written.
        QVERIFY_THROWS_EXCEPTION(StoreError,
            store::addStepGenerations(store, runId + 1, 2, storedGenerations(*tokenizer_, {"1+1=2\n"}, "x")));
        auto broken = storedGenerations(*tokenizer_, {"1+1=2\n", "2+2=4\n"}, "x");
        broken[1].details.pop_back();
        QVERIFY_THROWS_EXCEPTION(StoreError, store::addStepGenerations(store, runId, 2, broken));
        QCOMPARE(store::stepsWithGenerations(store, runId), (std::vector<std::int64_t> {1, 3}));
        QCOMPARE(store::stepGenerations(store, runId, 3)[1].promptId, std::string("arith-train-2"));

        ui::RunPlot plot;
        plot.resize(1000, 600);
        plot.setStore(&store);
        QVERIFY(!plot.drillDownButton()->isEnabled()); // no run shown
        plot.showRun(runId, QStringLiteral("opd fp8-kv"));
        plot.show();
        QVERIFY(QTest::qWaitForWindowExposed(&plot));
        QCOMPARE(plot.rolloutStepBox()->count(), 2);
        QCOMPARE(plot.rolloutStepBox()->currentText(), QStringLiteral("3"));
        QVERIFY(plot.drillDownButton()->isEnabled());
        QVERIFY(plot.openDrillDown(2) == nullptr); // nothing kept at step 2
        QPointer<ui::TokenDrillDown> dialog = plot.openDrillDown(3);
        QVERIFY(dialog);
        QVERIFY(QTest::qWaitForWindowExposed(dialog));
        QVERIFY2(dialog->flagsText().contains(QLatin1String("repetition")), qPrintable(dialog->flagsText()));
        dialog->jumpToNextLargest();
        QCOMPARE(dialog->selectedToken(), 4);
        // The first kept rollout's text (tokens are separated by zero-width spaces; the selected one is marked).
        QString shown = dialog->tokenView()->toPlainText();
        shown.remove(QChar(0x200B)).remove(QChar(0x25B8));
        QVERIFY2(shown.contains(QLatin1String("7*3=21;21-1=20")), qPrintable(shown));
        const QString prefix = scale_ > 1.0 ? QStringLiteral("high_dpi_token_drilldown") : QStringLiteral("token_drilldown");
        dialog->resize(1000, 560);
        fixture::saveScreenshot(*dialog, prefix + QStringLiteral("_run_step.png"));
        fixture::saveScreenshot(plot, prefix + QStringLiteral("_run_plot.png"));
        dialog->close();
        QTRY_VERIFY(dialog.isNull());
        plot.showRun(0, {});
        QVERIFY(!plot.drillDownButton()->isEnabled());
        QCOMPARE(plot.rolloutStepBox()->count(), 0);
    }

private:
    QTemporaryDir directory_;
    std::optional<model::Tokenizer> tokenizer_;
    double scale_ = 1.0;
};

MISMATCH_TEST_MAIN(TestTokenDrillDown)
#include "test_token_drilldown.moc"
