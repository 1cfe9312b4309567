#include "ui/views/run_table_model.h"

#include "ui/plots/glossary_tips.h"

#include <QBrush>
#include <QColor>

#include <algorithm>
#include <set>

namespace mismatch::ui {

RunTableModel::RunTableModel(QObject* parent) : QAbstractTableModel(parent)
{
    connect(&pollTimer_, &QTimer::timeout, this, &RunTableModel::poll);
}

void RunTableModel::setStore(store::RunStore* store)
{
    store_ = store;
    lastChangeCounter_ = -1;
    beginResetModel();
    runs_.clear();
    endResetModel();
    refresh();
}

void RunTableModel::setLivePolling(int intervalMs)
{
    if (intervalMs <= 0) {
        pollTimer_.stop();
    } else {
        pollTimer_.start(intervalMs);
    }
}

void RunTableModel::poll()
{
    if (!store_) {
        return;
    }
    // Everything a poll triggers (this model's refresh and the views listening to refreshed()) reads the store;
    // an exception must not escape into the event loop, where it would end the application.
    try {
        const std::int64_t counter = store_->changeCounter();
        if (counter != lastChangeCounter_) {
            refresh();
        }
        if (!lastError_.isEmpty()) {
            lastError_.clear();
            emit storeRecovered();
        }
    } catch (const std::exception& error) {
        lastChangeCounter_ = -1; // read everything again at the next poll: recovery is a successful full read
        const QString message = QString::fromUtf8(error.what());
        if (message != lastError_) {
            lastError_ = message;
            emit storeError(message);
        }
    }
}

void RunTableModel::refresh()
{
    if (!store_) {
        return;
    }
    lastChangeCounter_ = store_->changeCounter();
    const std::vector<store::RunInfo> fresh = store_->listRuns();
    removeVanishedRuns(fresh);
    // Now every row's run is in `fresh`, and both are ordered by id: walk them together, inserting each block of
    // runs the rows do not have yet before the row that follows it.
    std::size_t row = 0;
    std::size_t next = 0;
    while (next < fresh.size()) {
        if (row < runs_.size() && runs_[row].id == fresh[next].id) {
            runs_[row++] = fresh[next++];
            continue;
        }
        std::size_t end = next;
        while (end < fresh.size() && (row == runs_.size() || fresh[end].id != runs_[row].id)) {
            ++end;
        }
        const auto at = static_cast<std::ptrdiff_t>(row);
        beginInsertRows({}, static_cast<int>(row), static_cast<int>(row + (end - next)) - 1);
        runs_.insert(runs_.begin() + at, fresh.begin() + static_cast<std::ptrdiff_t>(next),
            fresh.begin() + static_cast<std::ptrdiff_t>(end));
        endInsertRows();
        row += end - next;
        next = end;
    }
    if (!runs_.empty()) {
        emit dataChanged(index(0, 0), index(rowCount() - 1, ColumnCount - 1));
    }
    emit refreshed();
}

void RunTableModel::removeVanishedRuns(const std::vector<store::RunInfo>& fresh)
{
    std::set<std::int64_t> present;
    for (const store::RunInfo& run : fresh) {
        present.insert(run.id);
    }
    // From the last row up, so that the rows still to look at keep their numbers.
    int row = rowCount() - 1;
    while (row >= 0) {
        if (present.count(runs_[static_cast<std::size_t>(row)].id) > 0) {
            --row;
            continue;
        }
        int first = row;
        while (first > 0 && present.count(runs_[static_cast<std::size_t>(first - 1)].id) == 0) {
            --first;
        }
        emit removingRows(true);
        beginRemoveRows({}, first, row);
        runs_.erase(runs_.begin() + first, runs_.begin() + row + 1);
        endRemoveRows();
        emit removingRows(false);
        row = first - 1;
    }
}

int RunTableModel::rowCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : static_cast<int>(runs_.size());
}

int RunTableModel::columnCount(const QModelIndex& parent) const
{
    return parent.isValid() ? 0 : ColumnCount;
}

const store::RunInfo* RunTableModel::runAt(int row) const
{
    return row >= 0 && row < static_cast<int>(runs_.size()) ? &runs_[static_cast<size_t>(row)] : nullptr;
}

int RunTableModel::rowOfRun(std::int64_t runId) const
{
    // Rows are ordered by run id.
    const auto found = std::lower_bound(
        runs_.begin(), runs_.end(), runId, [](const store::RunInfo& run, std::int64_t id) { return run.id < id; });
    return found != runs_.end() && found->id == runId ? static_cast<int>(found - runs_.begin()) : -1;
}

QVariant RunTableModel::data(const QModelIndex& index, int role) const
{
    const store::RunInfo* run = runAt(index.row());
    if (!run) {
        return {};
    }
    if (role == Qt::DisplayRole) {
        switch (index.column()) {
        case Id: return QVariant::fromValue<qlonglong>(run->id);
        case Name: return QString::fromStdString(run->name);
        case Kind: return QString::fromStdString(run->kind);
        case Status: return QString::fromStdString(store::toString(run->status));
        case Steps: return QVariant::fromValue<qlonglong>(run->stepCount);
        case LastStep: return run->lastStep ? QVariant::fromValue<qlonglong>(*run->lastStep) : QVariant(QStringLiteral("-"));
        case Mismatch: return run->lastMismatch ? QVariant(QString::number(*run->lastMismatch, 'g', 4)) : QVariant(QStringLiteral("-"));
        case Started: return QString::fromStdString(run->startedAt);
        default: return {};
        }
    }
    if (role == Qt::ForegroundRole && index.column() == Status) {
        switch (run->status) {
        case store::RunStatus::Running: return QBrush(QColor(0x1f, 0x6f, 0xd1));
        case store::RunStatus::Finished: return QBrush(QColor(0x2e, 0x7d, 0x32));
        case store::RunStatus::Failed: return QBrush(QColor(0xc6, 0x28, 0x28));
        case store::RunStatus::Cancelled: return QBrush(QColor(0x75, 0x75, 0x75));
        }
    }
    if (role == Qt::ToolTipRole && !run->error.empty()) {
        return QString::fromStdString(run->error);
    }
    if (role == Qt::TextAlignmentRole && (index.column() == Id || index.column() == Steps ||
                                             index.column() == LastStep || index.column() == Mismatch)) {
        return QVariant(Qt::AlignRight | Qt::AlignVCenter);
    }
    return {};
}

QVariant RunTableModel::headerData(int section, Qt::Orientation orientation, int role) const
{
    if (orientation == Qt::Horizontal && role == Qt::ToolTipRole) {
        // A title naming a glossary term ("Mismatch") explains it.
        const QString tip = glossaryTipFor(headerData(section, orientation, Qt::DisplayRole).toString());
        return tip.isEmpty() ? QVariant() : QVariant(tip);
    }
    if (orientation != Qt::Horizontal || role != Qt::DisplayRole) {
        return QAbstractTableModel::headerData(section, orientation, role);
    }
    switch (section) {
    case Id: return tr("ID");
    case Name: return tr("Name");
    case Kind: return tr("Kind");
    case Status: return tr("Status");
    case Steps: return tr("Steps");
    case LastStep: return tr("Last step");
    case Mismatch: return tr("Mismatch (nats/token)");
    case Started: return tr("Started (UTC)");
    default: return {};
    }
}

}  // namespace mismatch::ui
