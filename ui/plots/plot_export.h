#pragma once
// Export of plots (PNG, PDF, SVG, chosen by the file's suffix) and tables (CSV). Files are written under a
// temporary name in the target directory and renamed, so a failed export never leaves a half-written file.
#include "core/common/output_check.h"

#include <QString>

#include <vector>

class QAbstractItemModel;
class QCustomPlot;
class QTableView;
class QWidget;

namespace mismatch::ui {

// Files no plot or table export may overwrite (the open workspace's database, its -wal and -shm; issue 46): the
// exports below refuse them, naming both. Replaces the previous list.
void setProtectedFiles(std::vector<NamedInput> files);

// Writes `plot` to `path` (.png: at twice the widget's pixel size for high-DPI screens and print; .pdf and
// .svg: vector). Returns an empty string on success, else what went wrong (naming the file).
QString exportPlot(QCustomPlot* plot, const QString& path);

// Writes every row and column of `model` as CSV (RFC 4180 quoting, a header row from the horizontal header,
// DisplayRole text). Returns an empty string on success, else what went wrong (naming the file).
QString exportCsv(const QAbstractItemModel& model, const QString& path);
// The CSV text exportCsv writes.
QString toCsv(const QAbstractItemModel& model);

// Adds a right-click menu "Export plot as PNG/PDF/SVG..." to `plot`; errors are shown on `parent`.
void addPlotExportMenu(QCustomPlot* plot);
// Adds a right-click menu "Export table as CSV..." and "Copy as CSV" to `view`.
void addTableExportMenu(QTableView* view);

} // namespace mismatch::ui
