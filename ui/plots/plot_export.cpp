#include "ui/plots/plot_export.h"

#include "core/common/file_io.h"

#include <qcustomplot.h>

#include <QAbstractItemModel>
#include <QClipboard>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QGuiApplication>
#include <QMenu>
#include <QMessageBox>
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

// The open workspace's database files (MainWindow::openWorkspace): no plot or table is written over them.
std::vector<NamedInput>& protectedFiles()
{
    static std::vector<NamedInput> files;
    return files;
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

void setProtectedFiles(std::vector<NamedInput> files)
{
    protectedFiles() = std::move(files);
}

QString exportCsv(const QAbstractItemModel& model, const QString& path)
{
    try {
        requireOutputNotInput(path.toStdString(), protectedFiles(), {}, "table");
        // Through a temporary file next to `path` and a rename; a device or FIFO is written to, not replaced.
        const QByteArray text = toCsv(model).toUtf8();
        writeFileAtomically(path.toStdString(), std::string(text.constData(), static_cast<std::size_t>(text.size())));
    } catch (const std::exception& error) {
        return QObject::tr("Cannot write %1: %2").arg(path, QString::fromUtf8(error.what()));
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
    try {
        requireOutputNotInput(path.toStdString(), protectedFiles(), {}, "plot");
    } catch (const std::exception& error) {
        return QObject::tr("Cannot write %1: %2").arg(path, QString::fromUtf8(error.what()));
    }
    // Rendered into a private temporary file, then written to `path` as any output is (writeFileAtomically: a
    // temporary file beside it renamed over it; a device or FIFO written to, never replaced).
    QTemporaryFile rendered(QDir::tempPath() + "/mismatch-plot-XXXXXX." + suffix);
    if (!rendered.open()) {
        return QObject::tr("Cannot write %1: %2").arg(path, rendered.errorString());
    }
    rendered.close();
    const QString renderedPath = rendered.fileName();
    const int width = plot->width();
    const int height = plot->height();
    bool ok = false;
    if (suffix == QLatin1String("png")) {
        ok = plot->savePng(renderedPath, width, height, 2.0);
    } else if (suffix == QLatin1String("pdf")) {
        ok = plot->savePdf(renderedPath, width, height);
    } else {
        QSvgGenerator generator;
        generator.setFileName(renderedPath);
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
    if (!ok || !rendered.open() || rendered.size() == 0) {
        return QObject::tr("Cannot write %1: rendering the plot failed").arg(path);
    }
    const QByteArray bytes = rendered.readAll();
    try {
        writeFileAtomically(path.toStdString(), std::string(bytes.constData(), static_cast<std::size_t>(bytes.size())));
    } catch (const std::exception& error) {
        return QObject::tr("Cannot write %1: %2").arg(path, QString::fromUtf8(error.what()));
    }
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
