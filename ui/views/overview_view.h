#pragma once
// The Overview tab, where the window opens: what the workspace knows per student and what to do next.
//   - per student (a calibration's student directory): the current budget per step (the newest calibration's
//     brackets, threshold, BF16 multiple and its protocol's flags) and the best admitted candidates (lowest weight
//     memory first: mismatch with its interval, BF16 multiple, weight memory and KV-cache capacity against BF16,
//     from the recipe each was measured with);
//   - the latest runs with a sparkline of their per-step mismatch and its trend (a run without one says so, and an
//     imported run that logged sampled-token estimators instead names them and their step counts);
//   - next steps for what is missing (no model or run yet, no budget, no admission check, no sensitivity scan, a
//     flagged budget), each with a button that opens the right dialog (actionRequested()).
// Everything is read from the store through AnalysisData and RunStore; nothing here writes.
#include "core/model/config.h"
#include "core/store/run_store.h"
#include "ui/views/analysis_data.h"

#include <QWidget>

#include <optional>
#include <vector>

class QLabel;
class QPushButton;
class QScrollArea;
class QTableWidget;
class QVBoxLayout;

namespace mismatch::ui {

class OverviewView : public QWidget {
    Q_OBJECT
public:
    enum Action {
        RunDemo,
        AddModel,
        StartTraining,
        StartCalibration, // argument: the student directory (may be empty)
        StartAdmission, // id: the calibration to take the threshold from (0: any)
        StartSensitivity, // argument: the model directory
        StartPrefixShift,
        ShowRun, // id: the run
        ShowBudget, // id: the calibration
        ShowAdmission,
    };

    // One row of "best admitted candidates".
    struct Candidate {
        std::int64_t decisionId = 0;
        QString name;
        QString checkpoint;
        double mismatch = 0.0;
        double ciLow = 0.0;
        double ciHigh = 0.0;
        std::optional<double> bf16Multiple;
        std::optional<std::int64_t> weightBytes; // from the recipe resolved for the student
        std::optional<std::int64_t> bf16WeightBytes;
        std::optional<double> kvCapacityRatio; // KV tokens that fit the same memory, relative to BF16
        QString memoryUnknown; // why memory and capacity are unknown (empty when they are known)
        QString notes; // protocol differs / flagged calibration
    };

    explicit OverviewView(QWidget* parent = nullptr);

    void setStore(const store::RunStore* store);
    // Re-reads the store and rebuilds the page (keeps the scroll position).
    void refresh();

    // What the page shows, for tests: the students it has a section for, the budget table and the candidates of
    // one of them, the next-step buttons' texts, the latest runs' table.
    QStringList students() const;
    QTableWidget* budgetTable(int student) const;
    QTableWidget* candidateTable(int student) const;
    std::vector<Candidate> bestCandidates(int student) const;
    QTableWidget* latestRuns() const { return latestRuns_; }
    QList<QPushButton*> actionButtons() const;
    QPushButton* actionButton(const QString& text) const;
    QString pageText() const;

signals:
    void actionRequested(int action, qint64 id, const QString& argument);

private:
    struct StudentSection {
        QString directory;
        QTableWidget* budget = nullptr;
        QTableWidget* candidates = nullptr;
        std::vector<Candidate> best;
    };
    QPushButton* addAction(QWidget* parent, QLayout* layout, const QString& text, Action action, qint64 id = 0,
        const QString& argument = {});
    void buildLatestRuns(QVBoxLayout* layout, QWidget* page);

    // What refresh() reads from the store.
    struct Workspace {
        std::vector<store::RunInfo> runs;
        std::vector<store::ModelRecord> models;
        std::vector<CalibrationInfo> calibrations;
        std::vector<AdmissionDecision> decisions;
        std::vector<SensitivityScanInfo> scans;
        std::size_t prefixShifts = 0;
    };
    // The pieces of the page, top to bottom.
    void addStartPanel(QVBoxLayout* layout);
    void addStudentSections(QVBoxLayout* layout, const Workspace& workspace);
    // One student's box: its budget (`calibration`: its newest, nullptr when none) and its best candidates.
    void addStudentSection(QVBoxLayout* layout, const QString& student, const CalibrationInfo* calibration,
        const std::vector<const AdmissionDecision*>& screened);
    void addBudget(QWidget* box, QVBoxLayout* boxLayout, StudentSection& section, const QString& student,
        const CalibrationInfo* calibration);
    void fillBudgetTable(QTableWidget* table, const CalibrationInfo& c);
    // The admitted decisions as candidates, least weight memory first, at most kBestCandidates.
    static std::vector<Candidate> admittedCandidates(
        const std::vector<const AdmissionDecision*>& screened, const std::optional<model::ModelConfig>& config);
    void addCandidates(QWidget* box, QVBoxLayout* boxLayout, StudentSection& section,
        const std::vector<const AdmissionDecision*>& screened, const CalibrationInfo* calibration);
    void fillCandidateTable(QTableWidget* table, const std::vector<Candidate>& candidates);
    void addNextSteps(QVBoxLayout* layout, const Workspace& workspace);

    const store::RunStore* store_ = nullptr;
    QScrollArea* scroll_ = nullptr;
    QWidget* page_ = nullptr;
    QTableWidget* latestRuns_ = nullptr;
    std::vector<StudentSection> sections_;
    QList<QPushButton*> buttons_;
};

// "rising", "falling" or "flat": the mean of a series' last quarter against its first quarter (a change of more
// than 10% either way), "" for fewer than four points.
QString trendOf(const std::vector<double>& values);

} // namespace mismatch::ui
