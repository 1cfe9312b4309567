#pragma once
// Layer sensitivity heatmap: one QCPColorMap cell per (layer, module group) of a sensitivity scan, coloured by
// the mismatch that quantizing only that group adds over the BF16 unit (nats/token). Hovering a cell shows
// its figures as a tooltip; clicking it shows them in the detail line and emits cellSelected().
#include "core/store/run_store.h"
#include "ui/analysis_data.h"

#include <QWidget>

#include <vector>

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QCPColorMap;
class QCPColorScale;
class QCPItemRect;
class QLabel;
class QMouseEvent;

namespace mismatch::ui {

class SensitivityView : public QWidget {
    Q_OBJECT
public:
    explicit SensitivityView(QWidget* parent = nullptr);

    void setStore(const store::RunStore* store);
    // Re-reads the list of scans (keeps the selected one when it still exists).
    void refresh();
    bool selectScan(std::int64_t scanId);
    std::int64_t scanId() const { return scanId_; }

    QCustomPlot* plot() const { return plot_; }
    QCPColorMap* colorMap() const { return colorMap_; }
    QComboBox* scanBox() const { return scanBox_; }
    // Logarithmic colour scale (default): one dominant cell no longer flattens the rest. Cells at or below the
    // scale's floor (the smallest positive added mismatch, at least 1e-4 of the largest) take the floor's colour;
    // tooltips and the detail line show the measured values.
    QCheckBox* logScaleBox() const { return logScale_; }
    bool logarithmic() const;
    const std::vector<std::string>& moduleGroups() const { return groups_; }
    std::int64_t layerCount() const { return layers_; }
    // The cell at (layer, group column), or nullptr when the scan has none there.
    const SensitivityCell* cell(std::int64_t layer, int groupColumn) const;
    // Text describing a cell (tooltip and detail line).
    QString describeCell(const SensitivityCell& cell) const;
    QString detailText() const;
    std::int64_t firstRow() const { return firstRow_; }
    // Pixel centre of a cell in plot coordinates (for tests that click it).
    QPoint cellCenter(std::int64_t layer, int groupColumn) const;

signals:
    void cellSelected(std::int64_t layer, const QString& moduleGroup);

private:
    void showScan(int comboIndex);
    const SensitivityCell* cellAtPixel(const QPoint& pixel) const;
    void onMouseMove(QMouseEvent* event);
    void onMousePress(QMouseEvent* event);

    const store::RunStore* store_ = nullptr;
    std::vector<SensitivityScanInfo> scans_;
    std::vector<SensitivityCell> cells_;
    std::vector<std::string> groups_;
    std::int64_t layers_ = 0; // one past the last layer with a cell
    std::int64_t firstRow_ = 0; // -1 when the scan has embedding / lm_head cells
    std::int64_t scanId_ = 0;
    bool logarithmic_ = false; // the colour scale shown is logarithmic
    QComboBox* scanBox_ = nullptr;
    QCheckBox* logScale_ = nullptr;
    QLabel* summary_ = nullptr;
    QLabel* detail_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QCPColorMap* colorMap_ = nullptr;
    QCPColorScale* colorScale_ = nullptr;
    QCPItemRect* selectionFrame_ = nullptr; // the clicked cell
};

} // namespace mismatch::ui
