#pragma once
// What every plot of the dashboard shares, so that they read and behave alike: the legend in a row above the data
// (never over it; clicking an entry hides or shows its series), a crosshair that follows the mouse and writes the
// values under it to a read-out line, drag and wheel zoom with double-click resetting the view, and a logarithmic
// or linear value axis; an axis title's glossary text as a tooltip when the mouse is over the title.
#include <QObject>
#include <QPoint>
#include <QString>

#include <cstdint>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

class QCPAbstractPlottable;
class QCPAxis;
class QCPAxisRect;
class QCPGraph;
class QCPItemStraightLine;
class QComboBox;
class QCustomPlot;
class QLabel;

namespace mismatch::store {
class RunStore;
}

namespace mismatch::ui {

// Moves `plot`'s legend into a row above the top axis rect, entries side by side (`perRow` to a row, 0: all in one),
// on a plain background. Clicking an entry shows or hides its series (a hidden one's entry is greyed); `onToggle`
// runs after each toggle (to rescale).
void placeLegendAbove(QCustomPlot* plot, std::function<void()> onToggle = {}, int perRow = 0);
// Shows or hides `plottable` and greys its legend entry when hidden.
void setSeriesVisible(QCustomPlot* plot, QCPAbstractPlottable* plottable, bool visible);

// Drag and wheel zoom in `orientations`; a double-click anywhere on the plot calls `reset` (the view's own fit).
void enableZoomAndReset(
    QCustomPlot* plot, std::function<void()> reset, Qt::Orientations orientations = Qt::Horizontal | Qt::Vertical);

// The read-out line under a plot's toolbar: grey, wrapped (a long read-out never widens the window), showing `idle`
// (default: how to hover, zoom and reset) until the mouse is over the data.
QLabel* makeReadout(QWidget* parent, const QString& objectName, const QString& idle = {});

// Fills `box` with the budgets a run can be drawn beside: "none" (data 0), then every stored calibration's bracket
// that gives an admission threshold, as "#ID NAME, step S: THRESHOLD" (Qt::UserRole: the calibration id,
// Qt::UserRole + 1: the step, Qt::UserRole + 2: the threshold in nats/token; a tooltip saying so). A store that
// cannot be read (or none) offers only "none". Signals of `box` are blocked while it is filled.
void fillBudgetChoices(QComboBox* box, store::RunStore* store);
// The row of such a list that offers calibration `calibrationId` at bracket `step` (0: "none"); -1 when none does.
int budgetChoiceRow(const QComboBox* box, std::int64_t calibrationId, std::int64_t step);

// Switches `axis` between a logarithmic scale (with decade ticks) and a linear one.
void setLogScale(QCPAxis* axis, bool logarithmic);

// Hovering an axis title (of an axis rect or a colour scale) of `plot` shows the glossary's text of the terms the
// title names (glossary_tips.h) as a tooltip; the tooltip goes when the mouse leaves the title. Turns on the plot's
// mouse tracking. Installing twice installs once.
void installAxisGlossaryTips(QCustomPlot* plot);
// The glossary tooltip of the axis title under `pixel` (plot coordinates); "" when no titled axis is there or its
// title names no term. The title's area is where QCustomPlot drew it at the last replot.
QString axisGlossaryTipAt(const QCustomPlot* plot, const QPoint& pixel);
// A point inside `axis`'s drawn title (halfway along the axis), for tests that hover it; nullopt when the axis has
// no title or it was not drawn yet.
std::optional<QPoint> axisTitlePoint(const QCPAxis* axis);

// The data point of `graph` whose key is nearest to `key` (nullopt when the graph is empty).
std::optional<std::pair<double, double>> nearestPoint(const QCPGraph* graph, double key);

// A vertical line that follows the mouse over `rects` (axis rects sharing their horizontal key axis), and a
// read-out of the values there: by default "KEYLABEL K: NAME VALUE · NAME VALUE ..." over every visible named
// graph of those rects at its nearest key (a graph whose nearest point lies at another key says so). `describe`
// replaces the default text.
class PlotCrosshair : public QObject {
public:
    using Describe = std::function<QString(double key)>;
    PlotCrosshair(
        QCustomPlot* plot, std::vector<QCPAxisRect*> rects, QLabel* readout, QString keyLabel, Describe describe = {});

    // Places the crosshair at `key` and writes the read-out (what a mouse move over that key does).
    void showAt(double key);
    void hide();
    QString text() const;

private:
    QString describeDefault(double key) const;

    QCustomPlot* plot_;
    std::vector<QCPAxisRect*> rects_;
    std::vector<QCPItemStraightLine*> lines_;
    QLabel* readout_;
    QString keyLabel_;
    QString idleText_;
    Describe describe_;
};

} // namespace mismatch::ui
