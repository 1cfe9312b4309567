#include "ui/views/overview_view.h"

#include "core/model/config.h"
#include "core/quant/recipe.h"
#include "core/quant/recipe_plan.h"
#include "core/store/analysis_store.h"
#include "core/store/import_store.h"
#include "core/store/sqlite_util.h"
#include "ui/views/admission_view.h"
#include "ui/views/analysis_data.h"
#include "ui/plots/glossary_tips.h"

#include <QDir>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPainter>
#include <QPainterPath>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QTableWidget>
#include <QVBoxLayout>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

namespace mismatch::ui {

namespace {
constexpr int kLatestRuns = 6;
constexpr int kBestCandidates = 5;

QString mebibytes(std::int64_t bytes)
{
    return QStringLiteral("%1 MiB").arg(static_cast<double>(bytes) / (1024.0 * 1024.0), 0, 'f', 3);
}

QTableWidget* makeTable(QWidget* parent, const QStringList& header, const char* name)
{
    auto* table = new QTableWidget(0, static_cast<int>(header.size()), parent);
    table->setObjectName(name);
    table->setHorizontalHeaderLabels(header);
    addGlossaryHeaderTips(table->model());
    table->verticalHeader()->hide();
    table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table->setSelectionBehavior(QAbstractItemView::SelectRows);
    table->setWordWrap(false);
    table->horizontalHeader()->setStretchLastSection(true);
    table->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
    table->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    return table;
}

// Shows every row without a scroll bar of its own: the page scrolls, not each table.
void fitRows(QTableWidget* table)
{
    table->resizeColumnsToContents();
    table->resizeRowsToContents();
    int height = table->horizontalHeader()->height() + 2 * table->frameWidth() + 2;
    for (int row = 0; row < table->rowCount(); ++row) {
        height += table->rowHeight(row);
    }
    if (table->horizontalScrollBar()->isVisible()) {
        height += table->horizontalScrollBar()->height();
    }
    table->setFixedHeight(height);
}

QTableWidgetItem* cell(const QString& text, Qt::Alignment alignment = Qt::AlignLeft | Qt::AlignVCenter)
{
    auto* item = new QTableWidgetItem(text);
    item->setTextAlignment(alignment);
    return item;
}

QTableWidgetItem* number(const QString& text)
{
    return cell(text, Qt::AlignRight | Qt::AlignVCenter);
}

QLabel* heading(QWidget* parent, const QString& text, int level)
{
    auto* label = new QLabel(QStringLiteral("<h%1 style=\"margin:0\">%2</h%1>").arg(level).arg(text), parent);
    label->setTextFormat(Qt::RichText);
    return label;
}

QLabel* note(QWidget* parent, const QString& text)
{
    auto* label = new QLabel(text, parent);
    label->setWordWrap(true);
    label->setTextFormat(Qt::RichText);
    label->setStyleSheet(QStringLiteral("color: #444"));
    return label;
}

// A small line of `values` (the run's per-step mismatch), drawn at the screen's pixel ratio.
QPixmap sparkline(const std::vector<double>& values, const QSize& size, qreal ratio)
{
    QPixmap pixmap(size * ratio);
    pixmap.setDevicePixelRatio(ratio);
    pixmap.fill(Qt::transparent);
    if (values.size() < 2) {
        return pixmap;
    }
    const auto [low, high] = std::minmax_element(values.begin(), values.end());
    const double span = *high > *low ? *high - *low : 1.0;
    QPainterPath path;
    for (size_t i = 0; i < values.size(); ++i) {
        const double x = 2.0 + (size.width() - 4.0) * static_cast<double>(i) / static_cast<double>(values.size() - 1);
        const double y = size.height() - 3.0 - (size.height() - 6.0) * (values[i] - *low) / span;
        if (i == 0) {
            path.moveTo(x, y);
        } else {
            path.lineTo(x, y);
        }
    }
    QPainter painter(&pixmap);
    painter.setRenderHint(QPainter::Antialiasing);
    painter.setPen(QPen(QColor(0x1f, 0x6f, 0xd1), 1.4));
    painter.drawPath(path);
    return pixmap;
}

// What a run without a full-vocabulary mismatch curve stored instead: its sampled-token estimates of KL(mu || pi)
// with their step counts ("40 steps of k1 and k3", "40 steps of k1 and 38 of k3"), or "" when it has none. k1 and k3
// are step_metrics columns; an imported run keeps k2 and NeMo-RL's gen_kl in extras_json, and its estimator record
// (external_runs.estimator_json) counts their steps.
QString sampledEstimates(const store::RunStore& store, const store::RunInfo& run)
{
    std::map<std::string, std::int64_t> steps;
    store::Statement columns(store.handle(), "SELECT count(k1), count(k3) FROM step_metrics WHERE run_id = ?");
    columns.bind(1, run.id);
    if (columns.step()) {
        steps["k1"] = columns.int64(0);
        steps["k3"] = columns.int64(1);
    }
    if (const auto external = store::externalRun(store, run.id)) {
        const nlohmann::json record = nlohmann::json::parse(external->estimatorJson, nullptr, false);
        for (const char* name : {"k2", "gen_kl"}) {
            if (record.is_object() && record.contains(name) && record[name].is_object()
                && record[name].contains("steps") && record[name]["steps"].is_number_integer()) {
                steps[name] = record[name]["steps"].get<std::int64_t>();
            }
        }
    }
    std::vector<std::pair<QString, std::int64_t>> found; // estimator, steps
    for (const char* name : {"k1", "k2", "k3", "gen_kl"}) {
        if (const auto count = steps.find(name); count != steps.end() && count->second > 0) {
            found.emplace_back(QString::fromLatin1(name), count->second);
        }
    }
    if (found.empty()) {
        return {};
    }
    const auto stepCount = [](std::int64_t n) { return QStringLiteral("%1 %2").arg(n).arg(n == 1 ? "step" : "steps"); };
    const bool sameSteps = std::all_of(
        found.begin(), found.end(), [&](const auto& estimator) { return estimator.second == found.front().second; });
    // "40 steps of k1 and k3", or "40 steps of k1, 38 of k2 and 38 of k3"
    QStringList items;
    for (const auto& [name, count] : found) {
        items << (sameSteps || items.isEmpty() ? name : QStringLiteral("%1 of %2").arg(count).arg(name));
    }
    QString what = items.back();
    if (items.size() > 1) {
        what = QStringList(items.mid(0, items.size() - 1)).join(QStringLiteral(", ")) + QStringLiteral(" and ") + what;
    }
    what = stepCount(found.front().second) + QStringLiteral(" of ") + what;
    return QObject::tr("no full-vocabulary mismatch; %1 (sampled-token estimates)").arg(what);
}

// The student a calibration or a checkpoint belongs to, as one key: the directory path without a trailing slash.
QString studentKey(const std::string& directory)
{
    return QDir::cleanPath(QString::fromStdString(directory));
}
} // namespace

QString trendOf(const std::vector<double>& values)
{
    if (values.size() < 4) {
        return {};
    }
    const size_t quarter = values.size() / 4;
    double first = 0.0;
    double last = 0.0;
    for (size_t i = 0; i < quarter; ++i) {
        first += values[i];
        last += values[values.size() - 1 - i];
    }
    first /= static_cast<double>(quarter);
    last /= static_cast<double>(quarter);
    const double scale = std::max(std::abs(first), 1e-300);
    if ((last - first) / scale > 0.10) {
        return QObject::tr("rising");
    }
    if ((last - first) / scale < -0.10) {
        return QObject::tr("falling");
    }
    return QObject::tr("flat");
}

OverviewView::OverviewView(QWidget* parent)
    : QWidget(parent)
{
    setObjectName("overview");
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    scroll_ = new QScrollArea(this);
    scroll_->setWidgetResizable(true);
    scroll_->setFrameShape(QFrame::NoFrame);
    layout->addWidget(scroll_);
    refresh();
}

void OverviewView::setStore(const store::RunStore* store)
{
    store_ = store;
    refresh();
}

QPushButton* OverviewView::addAction(
    QWidget* parent, QLayout* layout, const QString& text, Action action, qint64 id, const QString& argument)
{
    auto* button = new QPushButton(text, parent);
    button->setObjectName(QStringLiteral("overviewAction%1").arg(static_cast<int>(action)));
    connect(button, &QPushButton::clicked, this,
        [this, action, id, argument] { emit actionRequested(action, id, argument); });
    layout->addWidget(button);
    buttons_ << button;
    return button;
}

void OverviewView::refresh()
{
    const int scrolled = scroll_->verticalScrollBar()->value();
    sections_.clear();
    buttons_.clear();
    latestRuns_ = nullptr;
    page_ = new QWidget;
    page_->setObjectName("overviewPage");
    auto* layout = new QVBoxLayout(page_);
    layout->setSpacing(8);

    Workspace workspace;
    QString readError;
    if (store_) {
        try {
            const AnalysisData data(*store_);
            workspace.runs = store_->listRuns();
            workspace.models = store_->listModels();
            workspace.calibrations = data.calibrations();
            workspace.decisions = data.admissionDecisions();
            workspace.scans = data.sensitivityScans();
            workspace.prefixShifts = store::prefixShifts(*store_).size();
        } catch (const std::exception& error) {
            readError = QString::fromUtf8(error.what());
        }
    }
    layout->addWidget(heading(page_, tr("Overview"), 2));
    if (!readError.isEmpty()) {
        layout->addWidget(note(page_,
            tr("<span style=\"color:#c62828\">The workspace cannot be read: %1</span>")
                .arg(readError.toHtmlEscaped())));
    }
    layout->addWidget(note(page_,
        tr("%n run(s), ", nullptr, static_cast<int>(workspace.runs.size()))
            + tr("%n registered model(s), ", nullptr, static_cast<int>(workspace.models.size()))
            + tr("%n calibration(s), ", nullptr, static_cast<int>(workspace.calibrations.size()))
            + tr("%n admission decision(s), ", nullptr, static_cast<int>(workspace.decisions.size()))
            + tr("%n sensitivity scan(s) and ", nullptr, static_cast<int>(workspace.scans.size()))
            + tr("%n prefix-shift analysis(es).", nullptr, static_cast<int>(workspace.prefixShifts))));

    // ---- an empty workspace: where to start ------------------------------------------------------------------
    if (store_ && readError.isEmpty() && workspace.runs.empty() && workspace.calibrations.empty()
        && workspace.decisions.empty()) {
        addStartPanel(layout);
    }

    // A store that fails half-way (a damaged or vanished database) leaves what was built and says why.
    try {
        // ---- per student --------------------------------------------------------------------------------------
        addStudentSections(layout, workspace);

        // ---- latest runs --------------------------------------------------------------------------------------
        if (!workspace.runs.empty()) {
            buildLatestRuns(layout, page_);
        }
    } catch (const std::exception& error) {
        readError = QString::fromUtf8(error.what());
        layout->addWidget(note(page_,
            tr("<span style=\"color:#c62828\">The workspace cannot be read: %1</span>")
                .arg(readError.toHtmlEscaped())));
    }

    // ---- what to do next ----------------------------------------------------------------------------------
    if (store_ && readError.isEmpty()
        && !(workspace.runs.empty() && workspace.calibrations.empty() && workspace.decisions.empty())) {
        addNextSteps(layout, workspace);
    }
    layout->addStretch(1);
    // The previous page goes later: a refresh can run inside a signal of one of its buttons.
    if (QWidget* old = scroll_->takeWidget()) {
        old->hide();
        old->deleteLater();
    }
    scroll_->setWidget(page_);
    scroll_->verticalScrollBar()->setValue(scrolled);
}

void OverviewView::addStartPanel(QVBoxLayout* layout)
{
    auto* start = new QFrame(page_);
    start->setObjectName("overviewStart");
    start->setFrameShape(QFrame::StyledPanel);
    auto* startLayout = new QVBoxLayout(start);
    startLayout->addWidget(heading(start, tr("Start here"), 3));
    startLayout->addWidget(note(start,
        tr("This workspace holds no runs yet. The built-in demo registers an arithmetic teacher/student pair and "
           "its prompt sets, stores the student's mismatch budget and screens seven rollout configurations "
           "against it (a few seconds). Or add your own model folder, or train a run. Headless "
           "<code>mismatch</code> commands on the same workspace appear here live.")));
    auto* row = new QHBoxLayout;
    addAction(start, row, tr("Run the Demo"), RunDemo);
    addAction(start, row, tr("Add a Model Directory..."), AddModel);
    addAction(start, row, tr("Start a Training Run..."), StartTraining);
    row->addStretch(1);
    startLayout->addLayout(row);
    layout->addWidget(start);
}

void OverviewView::addStudentSections(QVBoxLayout* layout, const Workspace& workspace)
{
    // Students: the calibrations' students, newest calibration last; decisions join their calibration's student.
    std::map<QString, const CalibrationInfo*> newest;
    std::vector<QString> order;
    for (const CalibrationInfo& c : workspace.calibrations) {
        const QString key = studentKey(c.student);
        if (!newest.count(key)) {
            order.push_back(key);
        }
        newest[key] = &c; // ids increase: the last one is the newest
    }
    std::map<std::int64_t, QString> studentOfCalibration;
    for (const CalibrationInfo& c : workspace.calibrations) {
        studentOfCalibration[c.id] = studentKey(c.student);
    }
    std::map<QString, std::vector<const AdmissionDecision*>> decisionsOf;
    for (const AdmissionDecision& d : workspace.decisions) {
        QString key = d.calibrationId && studentOfCalibration.count(*d.calibrationId)
            ? studentOfCalibration[*d.calibrationId]
            : studentKey(d.checkpoint);
        if (!newest.count(key) && std::find(order.begin(), order.end(), key) == order.end()) {
            order.push_back(key);
        }
        decisionsOf[key].push_back(&d);
    }
    for (const QString& student : order) {
        const auto calibration = newest.find(student);
        addStudentSection(
            layout, student, calibration != newest.end() ? calibration->second : nullptr, decisionsOf[student]);
    }
}

void OverviewView::addStudentSection(QVBoxLayout* layout, const QString& student, const CalibrationInfo* calibration,
    const std::vector<const AdmissionDecision*>& screened)
{
    StudentSection section;
    section.directory = student;
    auto* box = new QFrame(page_);
    box->setFrameShape(QFrame::StyledPanel);
    auto* boxLayout = new QVBoxLayout(box);
    boxLayout->addWidget(heading(box, tr("Student %1").arg(QFileInfo(student).fileName().toHtmlEscaped()), 3));
    boxLayout->addWidget(note(box, QStringLiteral("<code>%1</code>").arg(student.toHtmlEscaped())));
    // The student's architecture, for the memory and KV capacity of each candidate's recipe.
    std::optional<model::ModelConfig> config;
    try {
        config = model::loadConfig((student + "/config.json").toStdString());
    } catch (const std::exception&) {
        config.reset(); // not a model directory here (a moved or shipped calibration): memory unknown
    }

    addBudget(box, boxLayout, section, student, calibration);

    // Best admitted candidates: the cheapest in weight memory first (their mismatch fits the budget).
    section.best = admittedCandidates(screened, config);
    addCandidates(box, boxLayout, section, screened, calibration);
    layout->addWidget(box);
    sections_.push_back(std::move(section));
}

void OverviewView::addBudget(QWidget* box, QVBoxLayout* boxLayout, StudentSection& section, const QString& student,
    const CalibrationInfo* calibration)
{
    // Budget per step.
    if (calibration) {
        const CalibrationInfo& c = *calibration;
        boxLayout->addWidget(note(box,
            tr("<b>Budget</b> from calibration #%1 %2 (%3)")
                .arg(c.id)
                .arg(QString::fromStdString(c.name).toHtmlEscaped(), QString::fromStdString(c.createdAt))));
        section.budget = makeTable(box,
            {tr("Step"), tr("Largest passing"), tr("Smallest failing"), tr("Threshold"), tr("Threshold x BF16"),
                tr("Flags"), tr("Undecided")},
            "overviewBudget");
        section.budget->horizontalHeaderItem(6)->setToolTip(
            tr("Points whose interval of the quality change contains the failure line: neither pass nor "
               "fail, so no bracket end rests on them."));
        section.budget->horizontalHeaderItem(4)->setToolTip(
            tr("The threshold over the baseline's BF16 unit at that step (the plain BF16 engine at the "
               "baseline runs' weights of that step)."));
        addGlossaryHeaderTips(section.budget->model()); // below the tooltips just set
        fillBudgetTable(section.budget, c);
        fitRows(section.budget);
        boxLayout->addWidget(section.budget);
        if (!c.flags.empty()) {
            boxLayout->addWidget(note(box,
                tr("\u26a0 The budget is flagged: a new calibration with more "
                   "held-out problems or another sweep may settle it.")));
        }
        auto* row = new QHBoxLayout;
        addAction(box, row, tr("Show in the Budget Tab"), ShowBudget, c.id);
        if (!c.flags.empty()) {
            addAction(box, row, tr("Start a New Calibration..."), StartCalibration, 0, student);
        }
        row->addStretch(1);
        boxLayout->addLayout(row);
    } else {
        auto* row = new QHBoxLayout;
        row->addWidget(note(box,
            tr("No budget yet for this student: a calibration trains it under increasing "
               "mismatch and finds where its quality breaks.")));
        addAction(box, row, tr("Start Calibration..."), StartCalibration, 0, student);
        row->addStretch(1);
        boxLayout->addLayout(row);
    }
}

void OverviewView::fillBudgetTable(QTableWidget* table, const CalibrationInfo& c)
{
    const auto brackets = AnalysisData(*store_).calibrationBrackets(c.id);
    const auto points = AnalysisData(*store_).calibrationPoints(c.id);
    for (const CalibrationBracket& b : brackets) {
        const int row = table->rowCount();
        table->insertRow(row);
        auto show
            = [](const std::optional<double>& v) { return v ? QString::number(*v, 'g', 4) : QObject::tr("none"); };
        table->setItem(row, 0, number(QString::number(b.step)));
        table->setItem(row, 1, number(show(b.largestPassing)));
        table->setItem(row, 2, number(show(b.smallestFailing)));
        table->setItem(row, 3, number(show(b.threshold)));
        // The threshold read against the baseline's own BF16 unit at this step (the unit of the
        // calibration's BF16-engine runs at that step's weights), not a unit of another step.
        const auto unit = baselineUnitAt(points, b.step);
        table->setItem(
            row, 4, number(b.threshold && unit ? QStringLiteral("%1x").arg(*b.threshold / *unit, 0, 'f', 0) : tr("-")));
        QStringList flags;
        for (const CalibrationFlag& flag : flagsAtStep(c, b.step)) {
            flags << QString::fromStdString(describeFlag(flag));
        }
        auto* flagItem
            = cell(flags.isEmpty() ? tr("none") : QStringLiteral("\u26a0 ") + flags.join(QStringLiteral("; ")));
        if (!flags.isEmpty()) {
            flagItem->setForeground(QColor(0x8d, 0x5a, 0x00));
            flagItem->setToolTip(flags.join(QLatin1Char('\n')));
        }
        table->setItem(row, 5, flagItem);
        QStringList undecided;
        for (const CalibrationPoint& p : points) {
            if (p.step == b.step && p.undecided()) {
                undecided << QStringLiteral("%1 (%2)").arg(
                    QString::fromStdString(p.label.empty() ? p.runName : p.label), QString::number(p.mismatch, 'g', 3));
            }
        }
        auto* undecidedItem
            = cell(undecided.isEmpty() ? tr("none") : QStringLiteral("? ") + undecided.join(QStringLiteral("; ")));
        if (!undecided.isEmpty()) {
            undecidedItem->setForeground(QColor(0xef, 0x8a, 0x17));
        }
        table->setItem(row, 6, undecidedItem);
    }
}

std::vector<OverviewView::Candidate> OverviewView::admittedCandidates(
    const std::vector<const AdmissionDecision*>& screened, const std::optional<model::ModelConfig>& config)
{
    std::vector<Candidate> best;
    for (const AdmissionDecision* d : screened) {
        if (d->decision != "admit") {
            continue;
        }
        Candidate candidate;
        candidate.decisionId = d->id;
        candidate.name = QString::fromStdString(d->candidateName);
        candidate.checkpoint = QFileInfo(QString::fromStdString(d->checkpoint)).fileName();
        candidate.mismatch = d->mismatch;
        candidate.ciLow = d->ciLow;
        candidate.ciHigh = d->ciHigh;
        candidate.bf16Multiple = bf16Multiple(*d);
        candidate.notes = decisionNotes(*d);
        if (!config) {
            candidate.memoryUnknown = tr("the student's config.json cannot be read here");
        } else {
            try {
                const quant::Recipe recipe
                    = d->recipeJson.empty() ? quant::Recipe {} : quant::parseRecipe(d->recipeJson, "candidate.json");
                const quant::RecipePlan plan = quant::resolveRecipe(recipe, *config);
                candidate.weightBytes = plan.weightBytes;
                candidate.bf16WeightBytes = plan.bf16WeightBytes;
                candidate.kvCapacityRatio = plan.kvCapacityRatio();
            } catch (const std::exception& error) {
                // A recipe that does not resolve for this architecture (written for another layer count):
                // memory and capacity unknown, and the cell says why.
                candidate.memoryUnknown
                    = tr("its recipe does not resolve for this student: %1").arg(QString::fromUtf8(error.what()));
            }
        }
        best.push_back(candidate);
    }
    std::stable_sort(best.begin(), best.end(), [](const Candidate& a, const Candidate& b) {
        const std::int64_t wa = a.weightBytes.value_or(std::numeric_limits<std::int64_t>::max());
        const std::int64_t wb = b.weightBytes.value_or(std::numeric_limits<std::int64_t>::max());
        return wa != wb ? wa < wb : a.mismatch < b.mismatch;
    });
    if (best.size() > static_cast<size_t>(kBestCandidates)) {
        best.resize(kBestCandidates);
    }
    return best;
}

void OverviewView::addCandidates(QWidget* box, QVBoxLayout* boxLayout, StudentSection& section,
    const std::vector<const AdmissionDecision*>& screened, const CalibrationInfo* calibration)
{
    if (!section.best.empty()) {
        const auto admitted = std::count_if(
            screened.begin(), screened.end(), [](const AdmissionDecision* d) { return d->decision == "admit"; });
        const QString shown = admitted > static_cast<long>(section.best.size())
            ? tr("the %1 with the least weight memory").arg(section.best.size())
            : tr("least weight memory first");
        boxLayout->addWidget(note(box,
            tr("<b>Best admitted candidates</b> (%1 of %2 screened decisions admitted; %3)")
                .arg(admitted)
                .arg(screened.size())
                .arg(shown)));
        section.candidates = makeTable(box,
            {tr("Candidate"), tr("Checkpoint"), tr("Mismatch [95%]"), tr("x BF16"), tr("Weight memory"),
                tr("KV capacity"), tr("Notes")},
            "overviewCandidates");
        fillCandidateTable(section.candidates, section.best);
        fitRows(section.candidates);
        boxLayout->addWidget(section.candidates);
        auto* row = new QHBoxLayout;
        addAction(box, row, tr("Show in the Admission Tab"), ShowAdmission);
        row->addStretch(1);
        boxLayout->addLayout(row);
    } else {
        auto* row = new QHBoxLayout;
        row->addWidget(note(box,
            screened.empty()
                ? tr("No candidate rollout configuration screened against this budget yet.")
                : tr("None of the %n screened decision(s) was admitted.", nullptr, static_cast<int>(screened.size()))));
        auto* admit
            = addAction(box, row, tr("Start Admission Check..."), StartAdmission, calibration ? calibration->id : 0);
        admit->setEnabled(calibration != nullptr);
        if (!calibration) {
            admit->setToolTip(tr("An admission check needs a budget: calibrate the student first"));
        }
        row->addStretch(1);
        boxLayout->addLayout(row);
    }
}

void OverviewView::fillCandidateTable(QTableWidget* table, const std::vector<Candidate>& candidates)
{
    for (const Candidate& c : candidates) {
        const int row = table->rowCount();
        table->insertRow(row);
        table->setItem(row, 0, cell(c.name));
        table->setItem(row, 1, cell(c.checkpoint));
        table->setItem(row, 2,
            number(QStringLiteral("%1 [%2, %3]")
                       .arg(c.mismatch, 0, 'g', 3)
                       .arg(c.ciLow, 0, 'g', 3)
                       .arg(c.ciHigh, 0, 'g', 3)));
        table->setItem(
            row, 3, number(c.bf16Multiple ? QStringLiteral("%1x").arg(*c.bf16Multiple, 0, 'g', 3) : tr("-")));
        auto* memory = number(c.weightBytes && c.bf16WeightBytes && *c.bf16WeightBytes > 0
                ? tr("%1 (%2x BF16)")
                      .arg(mebibytes(*c.weightBytes))
                      .arg(static_cast<double>(*c.weightBytes) / static_cast<double>(*c.bf16WeightBytes), 0, 'f', 2)
                : tr("unknown"));
        auto* capacity = number(c.kvCapacityRatio ? tr("%1x BF16").arg(*c.kvCapacityRatio, 0, 'f', 2) : tr("unknown"));
        if (!c.memoryUnknown.isEmpty()) {
            for (QTableWidgetItem* item : {memory, capacity}) {
                item->setForeground(QColor(0x75, 0x75, 0x75));
                item->setToolTip(tr("Unknown: %1").arg(c.memoryUnknown));
            }
        }
        table->setItem(row, 4, memory);
        table->setItem(row, 5, capacity);
        auto* notes = cell(c.notes.isEmpty()
                ? QString()
                : QStringLiteral("\u26a0 ") + QString(c.notes).replace('\n', QStringLiteral("; ")));
        notes->setForeground(QColor(0x8d, 0x5a, 0x00));
        notes->setToolTip(c.notes);
        table->setItem(row, 6, notes);
    }
}

void OverviewView::addNextSteps(QVBoxLayout* layout, const Workspace& workspace)
{
    auto* next = new QFrame(page_);
    next->setObjectName("overviewNext");
    next->setFrameShape(QFrame::StyledPanel);
    auto* nextLayout = new QVBoxLayout(next);
    nextLayout->addWidget(heading(next, tr("Next steps"), 3));
    int suggestions = 0;
    auto suggest
        = [&](const QString& text, const QString& button, Action action, qint64 id = 0, const QString& argument = {}) {
              auto* row = new QHBoxLayout;
              row->addWidget(note(next, text), 1);
              addAction(next, row, button, action, id, argument);
              nextLayout->addLayout(row);
              ++suggestions;
          };
    if (workspace.models.empty()) {
        suggest(tr("No model is registered: add a model folder (config.json, safetensors, tokenizer.json) so the "
                   "dialogs can offer it, or run the demo, which registers the built-in pair."),
            tr("Add a Model Directory..."), AddModel);
    }
    if (workspace.calibrations.empty()) {
        suggest(tr("No mismatch budget yet: calibrate the student to learn how much mismatch it tolerates "
                   "before its quality breaks."),
            tr("Start Calibration..."), StartCalibration);
    } else if (workspace.decisions.empty()) {
        suggest(tr("A budget exists but no rollout configuration was screened against it: the admission check "
                   "measures each candidate's mismatch in minutes."),
            tr("Start Admission Check..."), StartAdmission, workspace.calibrations.back().id);
    }
    if (workspace.scans.empty()) {
        suggest(tr("No layer sensitivity scan: it shows which layers and modules to keep in BF16, and builds a "
                   "recipe from that."),
            tr("Start Sensitivity Scan..."), StartSensitivity, 0,
            workspace.models.empty() ? QString() : QString::fromStdString(workspace.models.front().path));
    }
    if (workspace.prefixShifts == 0) {
        suggest(tr("No prefix-shift analysis: it splits a configuration's mismatch into the per-token part and "
                   "the part that comes from reaching different prefixes."),
            tr("Start Prefix-Shift Analysis..."), StartPrefixShift);
    }
    if (suggestions == 0) {
        nextLayout->addWidget(note(next,
            tr("Every kind of analysis has results here. Train with an admitted "
               "configuration, or re-check it at later checkpoints.")));
        auto* row = new QHBoxLayout;
        addAction(next, row, tr("Start a Training Run..."), StartTraining);
        row->addStretch(1);
        nextLayout->addLayout(row);
    }
    layout->addWidget(next);
}

void OverviewView::buildLatestRuns(QVBoxLayout* layout, QWidget* page)
{
    std::vector<store::RunInfo> runs = store_->listRuns();
    layout->addWidget(heading(page, tr("Latest runs"), 3));
    latestRuns_ = makeTable(page,
        {tr("Run"), tr("Name"), tr("Kind"), tr("Status"), tr("Steps"), tr("Last mismatch"), tr("Mismatch by step"),
            tr("Trend")},
        "overviewRuns");
    const int first = std::max(0, static_cast<int>(runs.size()) - kLatestRuns);
    const qreal ratio = devicePixelRatioF();
    int sparkWidth = 150; // wide enough for a sparkline, wider for the longest text in its place
    for (int i = static_cast<int>(runs.size()) - 1; i >= first; --i) {
        const store::RunInfo& run = runs[static_cast<size_t>(i)];
        std::vector<double> kl; // only the one column, not whole step rows: this runs on every refresh
        store::Statement steps(store_->handle(),
            "SELECT mismatch_kl FROM step_metrics WHERE run_id = ? AND mismatch_kl IS NOT NULL ORDER BY step");
        steps.bind(1, run.id);
        while (steps.step()) {
            kl.push_back(steps.real(0));
        }
        const int row = latestRuns_->rowCount();
        latestRuns_->insertRow(row);
        auto* id = number(QStringLiteral("#%1").arg(run.id));
        id->setData(Qt::UserRole, QVariant::fromValue<qlonglong>(run.id));
        latestRuns_->setItem(row, 0, id);
        latestRuns_->setItem(row, 1, cell(QString::fromStdString(run.name)));
        latestRuns_->setItem(row, 2, cell(QString::fromStdString(run.kind)));
        latestRuns_->setItem(row, 3, cell(QString::fromStdString(store::toString(run.status))));
        latestRuns_->setItem(row, 4, number(QString::number(run.stepCount)));
        latestRuns_->setItem(row, 5, number(run.lastMismatch ? QString::number(*run.lastMismatch, 'g', 4) : tr("-")));
        auto* spark = new QLabel(latestRuns_);
        spark->setObjectName("overviewSparkline");
        if (kl.size() < 2) {
            // A run without a per-step curve (an admission check, a shipped calibration run) says so in words; an
            // imported run that logged sampled-token estimators only (k1, k3, ...) says which, on how many steps.
            const QString sampled = kl.empty() ? sampledEstimates(*store_, run) : QString();
            spark->setText(!sampled.isEmpty() ? sampled : kl.empty() ? tr("no per-step mismatch") : tr("one step"));
            spark->setToolTip(sampled);
            spark->setStyleSheet(QStringLiteral("color: #757575; padding-left: 4px"));
            sparkWidth = std::max(sparkWidth, spark->sizeHint().width() + 8);
        } else {
            spark->setPixmap(sparkline(kl, QSize(140, 22), ratio));
            spark->setToolTip(tr("%1 steps").arg(kl.size()));
        }
        latestRuns_->setCellWidget(row, 6, spark);
        latestRuns_->setItem(row, 7, cell(trendOf(kl)));
    }
    latestRuns_->setColumnWidth(6, sparkWidth);
    fitRows(latestRuns_);
    latestRuns_->setColumnWidth(6, sparkWidth);
    connect(latestRuns_, &QTableWidget::cellDoubleClicked, this, [this](int row, int) {
        emit actionRequested(ShowRun, latestRuns_->item(row, 0)->data(Qt::UserRole).toLongLong(), {});
    });
    layout->addWidget(latestRuns_);
    layout->addWidget(note(page, tr("Double-click a run to plot it in the Runs tab.")));
}

QStringList OverviewView::students() const
{
    QStringList result;
    for (const StudentSection& section : sections_) {
        result << section.directory;
    }
    return result;
}

QTableWidget* OverviewView::budgetTable(int student) const
{
    return student >= 0 && student < static_cast<int>(sections_.size()) ? sections_[static_cast<size_t>(student)].budget
                                                                        : nullptr;
}

QTableWidget* OverviewView::candidateTable(int student) const
{
    return student >= 0 && student < static_cast<int>(sections_.size())
        ? sections_[static_cast<size_t>(student)].candidates
        : nullptr;
}

std::vector<OverviewView::Candidate> OverviewView::bestCandidates(int student) const
{
    return student >= 0 && student < static_cast<int>(sections_.size()) ? sections_[static_cast<size_t>(student)].best
                                                                        : std::vector<Candidate> {};
}

QList<QPushButton*> OverviewView::actionButtons() const
{
    return buttons_;
}

QPushButton* OverviewView::actionButton(const QString& text) const
{
    for (QPushButton* button : buttons_) {
        if (button->text() == text) {
            return button;
        }
    }
    return nullptr;
}

QString OverviewView::pageText() const
{
    QStringList texts;
    for (const QLabel* label : page_->findChildren<QLabel*>()) {
        texts << label->text();
    }
    return texts.join(QLatin1Char('\n'));
}

} // namespace mismatch::ui
