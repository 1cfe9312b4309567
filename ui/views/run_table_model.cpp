#include "ui/views/run_table_model.h"

#include <QBrush>
#include <QColor>

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
    std::vector<store::RunInfo> fresh = store_->listRuns();
    // Runs are only ever appended (ids increase): update the common prefix in place, then insert the new rows.
    const int common = static_cast<int>(std::min(fresh.size(), runs_.size()));
    bool sameIds = true;
    for (int i = 0; i < common; ++i) {
        sameIds = sameIds && fresh[static_cast<size_t>(i)].id == runs_[static_cast<size_t>(i)].id;
    }
    if (!sameIds || fresh.size() < runs_.size()) {
        beginResetModel();
        runs_ = std::move(fresh);
        endResetModel();
        emit refreshed();
        return;
    }
    for (int i = 0; i < common; ++i) {
        runs_[static_cast<size_t>(i)] = fresh[static_cast<size_t>(i)];
    }
    if (common > 0) {
        emit dataChanged(index(0, 0), index(common - 1, ColumnCount - 1));
    }
    if (fresh.size() > runs_.size()) {
        beginInsertRows({}, common, static_cast<int>(fresh.size()) - 1);
        for (size_t i = static_cast<size_t>(common); i < fresh.size(); ++i) {
            runs_.push_back(fresh[i]);
        }
        endInsertRows();
    }
    emit refreshed();
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
