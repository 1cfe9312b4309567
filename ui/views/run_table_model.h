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
    // Re-reads the store now; updates rows in place so that selections survive a refresh.
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

signals:
    void refreshed();
    // A poll failed: `message` names the database and the problem. Emitted once per distinct problem.
    void storeError(const QString& message);
    // A poll succeeded after storeError().
    void storeRecovered();

private:
    void poll();

    store::RunStore* store_ = nullptr;
    std::vector<store::RunInfo> runs_;
    QTimer pollTimer_;
    std::int64_t lastChangeCounter_ = -1;
    QString lastError_;
};

}  // namespace mismatch::ui
