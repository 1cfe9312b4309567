#pragma once
// Layer sensitivity heatmap: one QCPColorMap cell per (layer, module group) of a sensitivity scan, coloured by the
// mismatch that quantizing only that group adds over the BF16 unit (nats/token), the value written in the cell
// when it fits. Positions where no such module exists (the embedding row's projections, each layer's embedding
// column) are hatched grey ("not applicable"); an applicable cell a partial scan has not measured yet stays
// blank. A second scan can be shown beside it ("Compare with"), both on one colour scale. Hovering a cell shows
// its figures; clicking selects it (Ctrl/Shift+click adds to the selection) and shows them in the detail line;
// "Keep selected in BF16" asks for recipe rules keeping those modules in BF16, "Build recipe from this scan" for
// the recipe builder with this scan.
#include "core/store/run_store.h"
#include "ui/views/analysis_data.h"

#include <QWidget>

#include <memory>
#include <set>
#include <utility>
#include <vector>

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QCPAxisRect;
class QCPColorMap;
class QCPColorScale;
class QCPItemRect;
class QCPItemText;
class QLabel;
class QMouseEvent;
class QPushButton;

namespace mismatch::ui {

class EmptyState;

// One scan drawn into one axis rect: its cells laid out as rows (layers; -1 for the embedding / lm_head) by
// module-group columns.
struct HeatmapPanel {
    std::int64_t scanId = 0;
    std::vector<SensitivityCell> cells;
    std::vector<std::string> groups; // columns, in pipeline order
    std::int64_t layers = 0; // one past the last layer with a cell
    std::int64_t firstRow = 0; // -1 when the scan has embedding / lm_head cells
    QCPAxisRect* rect = nullptr;
    QCPColorMap* map = nullptr;
    std::vector<QCPItemRect*> notApplicable; // hatched positions where no such module exists
    std::vector<std::pair<const SensitivityCell*, QCPItemText*>> labels; // the value written in each cell

    const SensitivityCell* cell(std::int64_t layer, int column) const;
    int column(const std::string& group) const;
};

// Whether a module group exists in a row: the embedding / lm_head groups only at layer -1, the others only at
// layers 0 and above.
bool groupApplies(const std::string& group, std::int64_t layer);

class SensitivityView : public QWidget {
    Q_OBJECT
public:
    explicit SensitivityView(QWidget* parent = nullptr);
    ~SensitivityView() override;

    void setStore(const store::RunStore* store);
    // Re-reads the list of scans (keeps the selected ones when they still exist).
    void refresh();
    bool selectScan(std::int64_t scanId);
    // Shows scan `scanId` beside the selected one on the same colour scale (0: none).
    bool compareWith(std::int64_t scanId);
    std::int64_t scanId() const { return main_.scanId; }
    std::int64_t comparedScanId() const { return compared_ ? compared_->scanId : 0; }
    // The scan's model directory (empty when it names no registered model).
    QString scanModelName() const;

    QCustomPlot* plot() const { return plot_; }
    QCPColorMap* colorMap() const { return main_.map; }
    QCPColorMap* comparedColorMap() const { return compared_ ? compared_->map : nullptr; }
    QCPColorScale* colorScale() const { return colorScale_; }
    const HeatmapPanel& panel() const { return main_; }
    const HeatmapPanel* comparedPanel() const { return compared_.get(); }
    QComboBox* scanBox() const { return scanBox_; }
    QComboBox* compareBox() const { return compareBox_; }
    // Logarithmic colour scale (default): one dominant cell no longer flattens the rest. Cells at or below the
    // scale's floor (the smallest positive added mismatch, at least 1e-4 of the largest) take the floor's colour;
    // tooltips and the detail line show the measured values.
    QCheckBox* logScaleBox() const { return logScale_; }
    bool logarithmic() const;
    const std::vector<std::string>& moduleGroups() const { return main_.groups; }
    std::int64_t layerCount() const { return main_.layers; }
    // The cell at (layer, group column), or nullptr when the scan has none there.
    const SensitivityCell* cell(std::int64_t layer, int groupColumn) const;
    // Text describing a cell (tooltip and detail line).
    QString describeCell(const SensitivityCell& cell) const;
    QString detailText() const;
    std::int64_t firstRow() const { return main_.firstRow; }
    // Pixel centre of a cell in plot coordinates (for tests that click it).
    QPoint cellCenter(std::int64_t layer, int groupColumn) const;
    // Cells whose value is written in them at the current size.
    int writtenCellCount() const;

    // Selected cells as (layer, module group).
    std::vector<std::pair<std::int64_t, std::string>> selectedCells() const;
    void setCellSelected(std::int64_t layer, const std::string& group, bool selected);
    void clearSelection();
    QPushButton* keepButton() const { return keepButton_; }
    QPushButton* buildButton() const { return buildButton_; }
    // Shown instead of the heatmap while the workspace has no scan: what the tab will show and "Start Sensitivity
    // Scan...".
    EmptyState* emptyState() const { return emptyState_; }

signals:
    void cellSelected(std::int64_t layer, const QString& moduleGroup);
    // "Keep selected in BF16": rules keeping these cells' modules in BF16 should go into the recipe editor.
    void keepInBf16Requested(const std::vector<std::pair<std::int64_t, std::string>>& cells);
    // "Build recipe from this scan...".
    void buildRecipeRequested(std::int64_t scanId);
    // The empty page's "Start Sensitivity Scan...": the scan's dialog should open.
    void startRequested();

private:
    void showScans();
    void fillPanel(HeatmapPanel& panel, std::int64_t scanId);
    void drawPanel(HeatmapPanel& panel, const std::vector<std::int64_t>& rows);
    void clearPanelItems(HeatmapPanel& panel);
    void fitColourScale();
    void updateCellLabels();
    void updateSelectionFrames();
    const SensitivityScanInfo* scanInfo(std::int64_t scanId) const;
    const SensitivityCell* cellAtPixel(const QPoint& pixel) const;
    void onMouseMove(QMouseEvent* event);
    void onMousePress(QMouseEvent* event);

    const store::RunStore* store_ = nullptr;
    std::vector<SensitivityScanInfo> scans_;
    HeatmapPanel main_;
    std::unique_ptr<HeatmapPanel> compared_;
    std::set<std::pair<std::int64_t, std::string>> selection_;
    bool logarithmic_ = false; // the colour scale shown is logarithmic
    double scaleLow_ = 0.0;
    double scaleHigh_ = 1.0;
    QComboBox* scanBox_ = nullptr;
    QComboBox* compareBox_ = nullptr;
    QCheckBox* logScale_ = nullptr;
    QLabel* summary_ = nullptr;
    QLabel* detail_ = nullptr;
    QLabel* selectionLabel_ = nullptr;
    QPushButton* keepButton_ = nullptr;
    QPushButton* buildButton_ = nullptr;
    EmptyState* emptyState_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QCPColorScale* colorScale_ = nullptr;
    std::vector<QCPItemRect*> selectionFrames_;
    QString scaleNote_; // what the colour scale's ends stand for (summary line, tooltip over the scale)
};

} // namespace mismatch::ui
