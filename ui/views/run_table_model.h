#pragma once
// The run browser's model: the workspace's runs, refreshed live when any process commits to the store.
#include "core/store/run_store.h"

#include <QAbstractTableModel>
#include <QTimer>

#include <memory>
#include <vector>

namespace mismatch::ui {

class RunTableModel : public QAbstractTableModel {
    Q_OBJECT
public:
    enum Column { Id, Name, Kind, Status, Steps, LastStep, Mismatch, Started, ColumnCount };

    explicit RunTableModel(QObject* parent = nullptr);

    // Reads runs from `store` (not owned; must outlive the model or be replaced). nullptr clears the model.
    void setStore(store::RunStore* store);
    // Re-reads the store now. Rows are matched by run id: a run that is gone is removed, a new one inserted at its
    // place (the runs are ordered by id), the others updated in place, so that a view's selection stays on the same
    // runs across a refresh whatever rows come or go (never a model reset, which would drop it).
    void refresh();
    // Polls the store's change counter every `intervalMs` and refreshes when it moved (cheap when idle). A store
    // error during a poll (a damaged or vanished database, a refused read) is caught and reported through
    // storeError(); polling goes on, so the window recovers when the store does.
    void setLivePolling(int intervalMs);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

    const store::RunInfo* runAt(int row) const;
    // The row of run `runId`, or -1 when the model does not hold it.
    int rowOfRun(std::int64_t runId) const;

signals:
    void refreshed();
    // Around the rows a refresh removes (runs deleted under the model): true before rowsAboutToBeRemoved, false
    // after rowsRemoved. A view's selection changes in between without its user doing anything.
    void removingRows(bool removing);
    // A poll failed: `message` names the database and the problem. Emitted once per distinct problem.
    void storeError(const QString& message);
    // A poll succeeded after storeError().
    void storeRecovered();

private:
    void poll();
    // Removes the rows of the runs `fresh` (ordered by id) no longer has, in blocks of adjacent rows.
    void removeVanishedRuns(const std::vector<store::RunInfo>& fresh);

    store::RunStore* store_ = nullptr;
    std::vector<store::RunInfo> runs_;
    QTimer pollTimer_;
    std::int64_t lastChangeCounter_ = -1;
    QString lastError_;
};

}  // namespace mismatch::ui
