#pragma once
// Mismatch against quality across the runs of a calibration: one marker per (run, step) point, green when it
// passed the failure rule and red when it failed, the budget bracket [largest passing, smallest failing]
// shaded and the admission threshold drawn. The table below lists the points (CSV export).
#include "core/store/run_store.h"
#include "ui/analysis_data.h"

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
    std::optional<CalibrationBracket> shownBracket() const { return shownBracket_; }

private:
    void showCalibration();

    const store::RunStore* store_ = nullptr;
    std::vector<CalibrationInfo> calibrations_;
    std::vector<CalibrationPoint> points_;
    std::vector<CalibrationBracket> brackets_;
    std::optional<CalibrationBracket> shownBracket_;
    QComboBox* calibrationBox_ = nullptr;
    QComboBox* stepBox_ = nullptr;
    QCheckBox* logScale_ = nullptr;
    QLabel* summary_ = nullptr;
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
};

} // namespace mismatch::ui
