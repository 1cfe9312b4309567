#include "ui/views/library_panels.h"

#include "core/common/error.h"
#include "ui/views/library_io.h"
#include "ui/plots/plot_export.h"

#include <QFileDialog>
#include <QGuiApplication>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QPushButton>
#include <QStandardItemModel>
#include <QTableView>
#include <QVBoxLayout>

namespace mismatch::ui {

namespace {

QTableView* makeTable(QWidget* parent, QStandardItemModel* model, const char* name)
{
    auto* table = new QTableView(parent);
    table->setObjectName(name);
    table->setModel(model);
    table->verticalHeader()->hide();
    table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    table->setSelectionBehavior(QAbstractItemView::SelectRows);
    table->setAlternatingRowColors(true);
    table->horizontalHeader()->setStretchLastSection(true);
    addTableExportMenu(table);
    return table;
}

QStandardItem* rightAligned(const QString& text)
{
    auto* item = new QStandardItem(text);
    item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
    return item;
}

void showStatus(QLabel* label, const QString& text, bool error)
{
    label->setText(text);
    label->setStyleSheet(error ? QStringLiteral("color: #c62828") : QString());
}

} // namespace

ModelLibraryPanel::ModelLibraryPanel(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    auto* top = new QHBoxLayout;
    auto* add = new QPushButton(tr("Add Model Directory..."), this);
    add->setObjectName("addModelButton");
    top->addWidget(add);
    status_ = new QLabel(tr("Drop a model folder (config.json + safetensors) on the window to add it."), this);
    status_->setObjectName("modelStatus");
    status_->setWordWrap(true);
    top->addWidget(status_, 1);
    layout->addLayout(top);
    model_ = new QStandardItemModel(this);
    table_ = makeTable(this, model_, "modelTable");
    layout->addWidget(table_, 1);
    connect(add, &QPushButton::clicked, this, [this] {
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Model directory"));
        if (!dir.isEmpty()) {
            addModelDirectory(dir);
        }
    });
}

void ModelLibraryPanel::setStore(store::RunStore* store)
{
    store_ = store;
    refresh();
}

void ModelLibraryPanel::refresh()
{
    model_->clear();
    model_->setHorizontalHeaderLabels(
        {tr("Name"), tr("Architecture"), tr("Layers"), tr("Parameters"), tr("Weights (BF16)"), tr("Path")});
    if (!store_) {
        return;
    }
    for (const store::ModelRecord& record : store_->listModels()) {
        QString layers = tr("?");
        QString memory = tr("?");
        try {
            const model::ModelConfig config = model::parseConfig(record.configJson, record.path + "/config.json");
            layers = QString::number(config.numLayers);
            memory = QString::fromStdString(formatBytes(static_cast<double>(bf16WeightBytes(config))));
        } catch (const Error& error) {
            memory = tr("unreadable config");
        }
        QList<QStandardItem*> row;
        row << new QStandardItem(QString::fromStdString(record.name))
            << new QStandardItem(QString::fromStdString(record.architecture)) << rightAligned(layers)
            << rightAligned(QString::fromStdString(formatCount(static_cast<double>(record.parameterCount))))
            << rightAligned(memory) << new QStandardItem(QString::fromStdString(record.path));
        row.front()->setData(QVariant::fromValue<qlonglong>(record.id), Qt::UserRole);
        row.front()->setData(QString::fromStdString(record.configJson), Qt::UserRole + 1);
        row.back()->setToolTip(QString::fromStdString(record.path));
        model_->appendRow(row);
    }
    table_->resizeColumnsToContents();
}

QString ModelLibraryPanel::addModelDirectory(const QString& directory)
{
    lastError_.clear();
    if (!store_) {
        lastError_ = tr("Open a workspace first.");
    } else {
        try {
            QGuiApplication::setOverrideCursor(Qt::WaitCursor);
            const store::ModelRecord record = inspectModelDirectory(directory.toStdString());
            store_->addModel(record);
            QGuiApplication::restoreOverrideCursor();
            showStatus(status_,
                tr("Added %1 (%2, %3 parameters).")
                    .arg(QString::fromStdString(record.name), QString::fromStdString(record.architecture),
                        QString::fromStdString(formatCount(static_cast<double>(record.parameterCount)))),
                false);
            refresh();
            emit modelsChanged();
            return {};
        } catch (const std::exception& error) {
            QGuiApplication::restoreOverrideCursor();
            lastError_ = tr("Cannot add %1: %2").arg(directory, QString::fromUtf8(error.what()));
        }
    }
    showStatus(status_, lastError_, true);
    return lastError_;
}

PromptSetPanel::PromptSetPanel(QWidget* parent)
    : QWidget(parent)
{
    auto* layout = new QVBoxLayout(this);
    auto* top = new QHBoxLayout;
    auto* add = new QPushButton(tr("Add Prompt Set..."), this);
    add->setObjectName("addPromptSetButton");
    top->addWidget(add);
    status_ = new QLabel(tr("Prompt sets are JSON Lines files; drop one on the window to add it."), this);
    status_->setObjectName("promptSetStatus");
    status_->setWordWrap(true);
    top->addWidget(status_, 1);
    layout->addLayout(top);
    model_ = new QStandardItemModel(this);
    table_ = makeTable(this, model_, "promptSetTable");
    layout->addWidget(table_, 1);
    connect(add, &QPushButton::clicked, this, [this] {
        const QString path
            = QFileDialog::getOpenFileName(this, tr("Prompt set"), {}, tr("JSON Lines (*.jsonl);;All files (*)"));
        if (!path.isEmpty()) {
            addPromptSetFile(path);
        }
    });
}

void PromptSetPanel::setStore(store::RunStore* store)
{
    store_ = store;
    refresh();
}

void PromptSetPanel::refresh()
{
    model_->clear();
    model_->setHorizontalHeaderLabels({tr("Name"), tr("Prompts"), tr("Path")});
    if (!store_) {
        return;
    }
    for (const store::PromptSetRecord& record : store_->listPromptSets()) {
        QList<QStandardItem*> row;
        row << new QStandardItem(QString::fromStdString(record.name))
            << rightAligned(QString::number(record.promptCount))
            << new QStandardItem(QString::fromStdString(record.path));
        model_->appendRow(row);
    }
    table_->resizeColumnsToContents();
}

QString PromptSetPanel::addPromptSetFile(const QString& path)
{
    lastError_.clear();
    if (!store_) {
        lastError_ = tr("Open a workspace first.");
    } else {
        try {
            const store::PromptSetRecord record = inspectPromptSet(path.toStdString());
            store_->addPromptSet(record);
            showStatus(status_,
                tr("Added %1 (%2 prompts).").arg(QString::fromStdString(record.name)).arg(record.promptCount), false);
            refresh();
            return {};
        } catch (const std::exception& error) {
            lastError_ = tr("Cannot add %1: %2").arg(path, QString::fromUtf8(error.what()));
        }
    }
    showStatus(status_, lastError_, true);
    return lastError_;
}

} // namespace mismatch::ui
