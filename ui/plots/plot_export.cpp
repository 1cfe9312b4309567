#include "ui/plots/plot_export.h"

#include <qcustomplot.h>

#include <QAbstractItemModel>
#include <QClipboard>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QMenu>
#include <QMessageBox>
#include <QSaveFile>
#include <QSvgGenerator>
#include <QTableView>
#include <QTemporaryFile>

namespace mismatch::ui {

namespace {

QString quoteCsv(QString field)
{
    if (field.contains(QLatin1Char(',')) || field.contains(QLatin1Char('"')) || field.contains(QLatin1Char('\n'))
        || field.contains(QLatin1Char('\r'))) {
        field.replace(QLatin1String("\""), QLatin1String("\"\""));
        return QLatin1Char('"') + field + QLatin1Char('"');
    }
    return field;
}

void showExportError(QWidget* parent, const QString& message)
{
    if (QGuiApplication::platformName() == QLatin1String("offscreen")) {
        qWarning("%s", qPrintable(message));
        return;
    }
    QMessageBox::warning(parent, QObject::tr("Export failed"), message);
}

} // namespace

QString toCsv(const QAbstractItemModel& model)
{
    QString text;
    QStringList header;
    for (int c = 0; c < model.columnCount(); ++c) {
        header << quoteCsv(model.headerData(c, Qt::Horizontal, Qt::DisplayRole).toString());
    }
    text += header.join(QLatin1Char(',')) + QLatin1String("\r\n");
    for (int r = 0; r < model.rowCount(); ++r) {
        QStringList row;
        for (int c = 0; c < model.columnCount(); ++c) {
            row << quoteCsv(model.data(model.index(r, c), Qt::DisplayRole).toString());
        }
        text += row.join(QLatin1Char(',')) + QLatin1String("\r\n");
    }
    return text;
}

QString exportCsv(const QAbstractItemModel& model, const QString& path)
{
    // QSaveFile writes a temporary file next to `path` and renames it on commit().
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly)) {
        return QObject::tr("Cannot write %1: %2").arg(path, file.errorString());
    }
    file.write(toCsv(model).toUtf8());
    if (!file.commit()) {
        return QObject::tr("Cannot write %1: %2").arg(path, file.errorString());
    }
    return {};
}

QString exportPlot(QCustomPlot* plot, const QString& path)
{
    const QFileInfo target(path);
    const QString suffix = target.suffix().toLower();
    if (suffix != QLatin1String("png") && suffix != QLatin1String("pdf") && suffix != QLatin1String("svg")) {
        return QObject::tr("Cannot export the plot to %1: expected a file name ending in .png, .pdf or .svg").arg(path);
    }
    // A temporary file in the target directory, renamed over the target when complete.
    QTemporaryFile temporary(target.absolutePath() + "/." + target.fileName() + ".XXXXXX." + suffix);
    if (!temporary.open()) {
        return QObject::tr("Cannot write %1: %2").arg(path, temporary.errorString());
    }
    temporary.close();
    const QString temporaryPath = temporary.fileName();
    const int width = plot->width();
    const int height = plot->height();
    bool ok = false;
    if (suffix == QLatin1String("png")) {
        ok = plot->savePng(temporaryPath, width, height, 2.0);
    } else if (suffix == QLatin1String("pdf")) {
        ok = plot->savePdf(temporaryPath, width, height);
    } else {
        QSvgGenerator generator;
        generator.setFileName(temporaryPath);
        generator.setSize(QSize(width, height));
        generator.setViewBox(QRect(0, 0, width, height));
        generator.setTitle(plot->objectName());
        QCPPainter painter;
        ok = painter.begin(&generator);
        if (ok) {
            plot->toPainter(&painter, width, height);
            ok = painter.end();
        }
    }
    if (!ok || QFileInfo(temporaryPath).size() == 0) {
        return QObject::tr("Cannot write %1: rendering the plot failed").arg(path);
    }
    if (QFile::exists(path) && !QFile::remove(path)) {
        return QObject::tr("Cannot replace %1").arg(path);
    }
    if (!QFile::rename(temporaryPath, path)) {
        return QObject::tr("Cannot rename %1 to %2").arg(temporaryPath, path);
    }
    temporary.setAutoRemove(false);
    // QTemporaryFile creates its file private (0600); an exported plot is an ordinary document.
    QFile::setPermissions(path, QFileDevice::ReadOwner | QFileDevice::WriteOwner | QFileDevice::ReadGroup
            | QFileDevice::ReadOther);
    return {};
}

void addPlotExportMenu(QCustomPlot* plot)
{
    plot->setContextMenuPolicy(Qt::CustomContextMenu);
    QObject::connect(plot, &QWidget::customContextMenuRequested, plot, [plot](const QPoint& position) {
        QMenu menu(plot);
        const struct {
            const char* label;
            const char* filter;
        } formats[] = {{"Export plot as PNG...", "PNG image (*.png)"}, {"Export plot as PDF...", "PDF (*.pdf)"},
            {"Export plot as SVG...", "SVG (*.svg)"}};
        for (const auto& format : formats) {
            menu.addAction(QObject::tr(format.label), plot, [plot, filter = QString(format.filter)] {
                const QString path = QFileDialog::getSaveFileName(plot, QObject::tr("Export plot"), {}, filter);
                if (path.isEmpty()) {
                    return;
                }
                const QString error = exportPlot(plot, path);
                if (!error.isEmpty()) {
                    showExportError(plot, error);
                }
            });
        }
        menu.exec(plot->mapToGlobal(position));
    });
}

void addTableExportMenu(QTableView* view)
{
    view->setContextMenuPolicy(Qt::CustomContextMenu);
    QObject::connect(view, &QWidget::customContextMenuRequested, view, [view](const QPoint& position) {
        if (!view->model()) {
            return;
        }
        QMenu menu(view);
        menu.addAction(QObject::tr("Export table as CSV..."), view, [view] {
            const QString path
                = QFileDialog::getSaveFileName(view, QObject::tr("Export table"), {}, QObject::tr("CSV (*.csv)"));
            if (path.isEmpty()) {
                return;
            }
            const QString error = exportCsv(*view->model(), path);
            if (!error.isEmpty()) {
                showExportError(view, error);
            }
        });
        menu.addAction(QObject::tr("Copy table as CSV"), view,
            [view] { QGuiApplication::clipboard()->setText(toCsv(*view->model())); });
        menu.exec(view->viewport()->mapToGlobal(position));
    });
}

} // namespace mismatch::ui
