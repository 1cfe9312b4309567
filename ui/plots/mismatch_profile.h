#pragma once
// Where a configuration's mismatch sits: for each configuration, the share of its summed full-vocabulary KL that
// falls in each bin of the engine's probability of the chosen token mu(y), or of the trainer's entropy at the prefix
// (metrics::EstimatorComparison's byProbability / byEntropy bins, stored with admission decisions, breakdowns and
// prefix-shift analyses). Grouped bars, one colour per configuration, the legend above; a list picks the axis. Used
// by the Breakdown and Admission tabs.
#include "core/metrics/estimators.h"

#include <QString>
#include <QWidget>

#include <utility>
#include <vector>

class QComboBox;
class QCustomPlot;
class QLabel;

namespace mismatch::ui {

class MismatchProfile : public QWidget {
    Q_OBJECT
public:
    enum Axis { ByProbability, ByEntropy }; // the list's order
    // Object names: PREFIX + "Profile" (the list), PREFIX + "ProfilePlot" (the plot).
    MismatchProfile(const QString& objectPrefix, QWidget* parent = nullptr);

    void setAxis(Axis axis);
    Axis axis() const;
    // The configurations to draw (name, comparison), in order; those without bins are left out and counted.
    void setSeries(std::vector<std::pair<QString, metrics::EstimatorComparison>> series);
    QCustomPlot* plot() const { return plot_; }
    QComboBox* axisBox() const { return axisBox_; }
    // How many configurations are drawn.
    int drawn() const { return drawn_; }

signals:
    void axisChanged();

private:
    void redraw();

    std::vector<std::pair<QString, metrics::EstimatorComparison>> series_;
    QComboBox* axisBox_ = nullptr;
    QCustomPlot* plot_ = nullptr;
    QLabel* note_ = nullptr;
    int drawn_ = 0;
};

} // namespace mismatch::ui
