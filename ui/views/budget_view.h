#pragma once
// Mismatch against quality across the runs of a calibration: one marker per (run, step) point, green when it
// passed the failure rule and red when it failed, the budget bracket [largest passing, smallest failing]
// shaded and the admission threshold drawn. The table below lists the points (CSV export).
#include "core/store/run_store.h"
#include "ui/views/analysis_data.h"

#include <QWidget>

#include <optional>

class QCheckBox;
class QComboBox;
class QCustomPlot;
class QCPItemRect;
class QCPItemStraightLine;
class QCPItemText;
class QLabel;
class QStandardItemModel;
class QTableView;

namespace mismatch::ui {

class EmptyState;

class BudgetView : public QWidget {
    Q_OBJECT
public:
    explicit BudgetView(QWidget* parent = nullptr);

    void setStore(const store::RunStore* store);
    void refresh();
    bool selectCalibration(std::int64_t calibrationId, std::optional<std::int64_t> step = std::nullopt);

    QCustomPlot* plot() const { return plot_; }
    QTableView* table() const { return table_; }
    // The mismatch axis is logarithmic by default (the sweep spans orders of magnitude); unchecked: linear.
    QCheckBox* logScaleBox() const { return logScale_; }
    QStandardItemModel* pointModel() const { return pointModel_; }
    QCPItemRect* bracketItem() const { return bracket_; }
    int passCount() const;
    int failCount() const;
    int undecidedCount() const;
    std::optional<CalibrationBracket> shownBracket() const { return shownBracket_; }
    // The failure rule's relative rise drawn (a fraction) and its label.
    double failureRise() const { return failureRise_; }
    QString failureRuleText() const;
    // The flag banner (hidden when the shown calibration and step are not flagged).
    QLabel* flagBanner() const { return banner_; }
    QString readoutText() const;
    // The read-out of the point nearest to `pixel` (what hovering there shows).
    void hoverAt(const QPoint& pixel);
    // Shown instead of the plot while the workspace has no calibration: what the tab will show and "Start
    // Calibration...".
    EmptyState* emptyState() const { return emptyState_; }

signals:
    // The empty page's "Start Calibration...": the calibration's dialog should open.
    void startRequested();

private:
    void showCalibration();
    // The extent of the points shown, for the axes' ranges.
    struct PointExtent {
        double xMinPositive = 0.0; // smallest positive mismatch shown (the log axis starts below it)
        double xMax = 0.0;
        double yMin = 0.0;
        double yMax = 0.0;
    };
    // The pieces of showCalibration(), in order: read the chosen calibration (returns its info), list its steps
    // (returns the chosen one), then the table, the failure line, the flag banner, the points and their labels,
    // the bracket, the threshold, the axes' ranges and the summary.
    std::optional<CalibrationInfo> loadCalibration();
    std::optional<std::int64_t> fillStepBox();
    void resetPointTable();
    void showFailureRule(const std::optional<CalibrationInfo>& info);
    void showFlags(const std::optional<CalibrationInfo>& info, std::optional<std::int64_t> step);
    PointExtent plotPoints(std::optional<std::int64_t> step);
    void labelPoints(std::optional<std::int64_t> step);
    // Shades the shown step's bracket (false when it has no end) and widens `extent` to hold it.
    bool drawBracket(bool logAxis, PointExtent& extent);
    void drawThreshold();
    void fitRanges(bool logAxis, const PointExtent& extent);
    void showSummary(bool haveBracket);
    void fitView();

    const store::RunStore* store_ = nullptr;
    std::vector<CalibrationInfo> calibrations_;
    std::vector<CalibrationPoint> points_;
    std::vector<CalibrationBracket> brackets_;
    std::optional<CalibrationBracket> shownBracket_;
    QComboBox* calibrationBox_ = nullptr;
    QComboBox* stepBox_ = nullptr;
    QCheckBox* logScale_ = nullptr;
    QLabel* summary_ = nullptr;
    QLabel* banner_ = nullptr;
    QLabel* readout_ = nullptr;
    double failureRise_ = 0.2;
    double fitX_[2] = {0.0, 1.0}; // the fitted view double-click returns to
    double fitY_[2] = {0.0, 1.0};
    QCustomPlot* plot_ = nullptr;
    QCPItemRect* bracket_ = nullptr;
    QCPItemStraightLine* thresholdLine_ = nullptr;
    QCPItemStraightLine* failLine_ = nullptr;
    QCPItemText* bracketLabel_ = nullptr;
    QCPItemText* thresholdLabel_ = nullptr;
    QCPItemText* failLabel_ = nullptr;
    std::vector<QCPItemText*> pointLabels_;
    QStandardItemModel* pointModel_ = nullptr;
    QTableView* table_ = nullptr;
    EmptyState* emptyState_ = nullptr;
};

} // namespace mismatch::ui
