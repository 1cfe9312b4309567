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
    // Polls the store's change counter every `intervalMs` and refreshes when it moved (cheap when idle).
    void setLivePolling(int intervalMs);

    int rowCount(const QModelIndex& parent = {}) const override;
    int columnCount(const QModelIndex& parent = {}) const override;
    QVariant data(const QModelIndex& index, int role) const override;
    QVariant headerData(int section, Qt::Orientation orientation, int role) const override;

    const store::RunInfo* runAt(int row) const;

signals:
    void refreshed();

private:
    void poll();

    store::RunStore* store_ = nullptr;
    std::vector<store::RunInfo> runs_;
    QTimer pollTimer_;
    std::int64_t lastChangeCounter_ = -1;
};

}  // namespace mismatch::ui
