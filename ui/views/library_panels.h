#pragma once
// The workspace's libraries: registered models (architecture, parameters, BF16 weight memory) and prompt
// sets. "Add..." (or a folder / .jsonl file dropped on the window) validates the files and registers them in
// the store, replacing an entry with the same path.
#include "core/store/run_store.h"

#include <QWidget>

class QLabel;
class QStandardItemModel;
class QTableView;

namespace mismatch::ui {

class ModelLibraryPanel : public QWidget {
    Q_OBJECT
public:
    enum Column { Name, Architecture, Layers, Parameters, Memory, Path, ColumnCount };
    explicit ModelLibraryPanel(QWidget* parent = nullptr);

    void setStore(store::RunStore* store);
    void refresh();
    // Validates DIRECTORY and registers it; returns an empty string or the error (also shown in the panel).
    QString addModelDirectory(const QString& directory);

    QTableView* table() const { return table_; }
    QStandardItemModel* model() const { return model_; }
    QString lastError() const { return lastError_; }

signals:
    void modelsChanged();

private:
    store::RunStore* store_ = nullptr;
    QStandardItemModel* model_ = nullptr;
    QTableView* table_ = nullptr;
    QLabel* status_ = nullptr;
    QString lastError_;
};

class PromptSetPanel : public QWidget {
    Q_OBJECT
public:
    enum Column { Name, Prompts, Path, ColumnCount };
    explicit PromptSetPanel(QWidget* parent = nullptr);

    void setStore(store::RunStore* store);
    void refresh();
    QString addPromptSetFile(const QString& path);

    QTableView* table() const { return table_; }
    QStandardItemModel* model() const { return model_; }
    QString lastError() const { return lastError_; }

private:
    store::RunStore* store_ = nullptr;
    QStandardItemModel* model_ = nullptr;
    QTableView* table_ = nullptr;
    QLabel* status_ = nullptr;
    QString lastError_;
};

} // namespace mismatch::ui
