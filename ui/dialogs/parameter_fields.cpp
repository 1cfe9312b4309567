#include "ui/dialogs/parameter_fields.h"

#include "core/common/error.h"
#include "ui/dialogs/job_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QLineEdit>
#include <QSpinBox>
#include <QStringList>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace mismatch::ui {

namespace {

// A spin box needs a finite range: the bound of a Number parameter without one (far beyond any value these jobs
// take).
constexpr double kNumberBound = 1e9;

int clampToInt(double value)
{
    return static_cast<int>(std::clamp(value, static_cast<double>(std::numeric_limits<int>::min()),
        static_cast<double>(std::numeric_limits<int>::max())));
}

// Paths and texts may hold commas, so their lists are separated by ';'; numbers and choices by ',' as on the
// command line.
bool semicolonList(const jobs::Parameter& parameter)
{
    return parameter.type == jobs::ParameterType::PathList || parameter.type == jobs::ParameterType::TextList;
}

// What an empty line edit means, shown as its placeholder.
QString placeholder(const jobs::Parameter& parameter)
{
    if (!parameter.defaultValue.is_null()) {
        const std::string text = jobs::valueText(parameter.defaultValue);
        return QObject::tr("default: %1").arg(text.empty() ? QObject::tr("none") : QString::fromStdString(text));
    }
    QString hint = parameter.required ? QObject::tr("required") : QObject::tr("not given");
    if (semicolonList(parameter)) {
        hint += QObject::tr("; items separated by ';'");
    } else if (jobs::isList(parameter.type)) {
        hint += QObject::tr("; items separated by ','");
    }
    return hint;
}

QStringList listItems(const jobs::Parameter& parameter, const QString& text)
{
    if (semicolonList(parameter)) {
        return splitPaths(text);
    }
    QStringList items;
    for (const QString& item : text.split(QLatin1Char(','))) {
        if (!item.trimmed().isEmpty()) {
            items.push_back(item.trimmed());
        }
    }
    return items;
}

// A value's text in a line edit: a list's items joined as listItems() splits them.
QString editText(const jobs::Parameter& parameter, const nlohmann::json& value)
{
    if (!value.is_array()) {
        return QString::fromStdString(jobs::valueText(value));
    }
    QStringList items;
    for (const nlohmann::json& item : value) {
        items.push_back(QString::fromStdString(jobs::valueText(item)));
    }
    return items.join(semicolonList(parameter) ? QStringLiteral("; ") : QStringLiteral(","));
}

QWidget* choiceBox(const jobs::Parameter& parameter, const nlohmann::json& start, QWidget* parent)
{
    auto* box = new QComboBox(parent);
    if (parameter.defaultValue.is_null()) {
        box->addItem(parameter.required ? QObject::tr("(choose)") : QObject::tr("(not given)"), QString());
    }
    for (const std::string& value : parameter.choices) {
        box->addItem(QString::fromStdString(value), QString::fromStdString(value));
    }
    if (start.is_string()) {
        box->setCurrentIndex(std::max(0, box->findData(QString::fromStdString(start.get<std::string>()))));
    }
    return box;
}

QWidget* integerBox(
    const jobs::Parameter& parameter, const FieldOptions& options, const nlohmann::json& start, QWidget* parent)
{
    auto* box = new QSpinBox(parent);
    const auto [low, high] = integerRange(parameter);
    if (!options.notGiven().isEmpty() && low > std::numeric_limits<int>::min()) {
        box->setRange(low - 1, high);
        box->setSpecialValueText(options.notGiven());
    } else {
        box->setRange(low, high);
        box->setSpecialValueText(options.special());
    }
    box->setValue(start.is_number() ? clampToInt(start.get<double>()) : box->minimum());
    return box;
}

QWidget* numberBox(
    const jobs::Parameter& parameter, const FieldOptions& options, const nlohmann::json& start, QWidget* parent)
{
    auto* box = new QDoubleSpinBox(parent);
    box->setDecimals(options.decimals());
    box->setSingleStep(options.step());
    // The range rounded inwards to the decimals shown (the box rounds its bounds to them); "+ 0.0" keeps a -0 out.
    const double scale = std::pow(10.0, options.decimals());
    // The value in units of the last decimal, rounded up or down unless it is (nearly) whole already.
    const auto units = [scale](double value, bool up) {
        const double n = std::round(value * scale);
        return std::abs(value * scale - n) < 1e-6 ? n : (up ? std::ceil(value * scale) : std::floor(value * scale));
    };
    double low = -kNumberBound;
    if (parameter.low) {
        double n = units(*parameter.low, true);
        if (parameter.lowExclusive && n / scale <= *parameter.low) {
            n += 1.0;
        }
        low = n / scale + 0.0;
    }
    const double high = parameter.high ? units(*parameter.high, false) / scale + 0.0 : kNumberBound;
    box->setRange(low, high);
    box->setValue(start.is_number() ? start.get<double>() : low);
    return box;
}

} // namespace

const jobs::JobDefinition& catalogueJob(const std::string& kind)
{
    return jobs::JobSpec(kind).definition();
}

const jobs::Parameter& jobParameter(const jobs::JobDefinition& job, const std::string& name)
{
    const jobs::Parameter* parameter = job.parameter(name);
    if (!parameter) {
        throw Error("the catalogue's job '" + job.kind + "' has no parameter '" + name + "'");
    }
    return *parameter;
}

QString fieldLabel(const jobs::Parameter& parameter)
{
    return QString::fromStdString(parameter.label) + (parameter.required ? QObject::tr(" *:") : QObject::tr(":"));
}

bool isPickedPath(const jobs::Parameter& parameter)
{
    // Output paths are typed (the job creates them).
    return parameter.type == jobs::ParameterType::Path && parameter.name != "out" && parameter.name != "directory";
}

PickKind pickKind(const jobs::Parameter& parameter)
{
    if (parameter.name == "model" || parameter.name == "staleness_from")
        return PickKind::ModelDirectory;
    if (parameter.name == "prompts")
        return PickKind::PromptSet;
    if (parameter.name == "recipe")
        return PickKind::Recipe;
    if (parameter.name == "run_file")
        return PickKind::RunFile;
    if (parameter.name == "candidates")
        return PickKind::Candidates;
    return PickKind::AnyFile;
}

std::pair<int, int> integerRange(const jobs::Parameter& parameter)
{
    // The whole numbers in the range: above an exclusive low, from an inclusive one.
    const double low = parameter.low
        ? (parameter.lowExclusive ? std::floor(*parameter.low) + 1.0 : std::ceil(*parameter.low))
        : static_cast<double>(std::numeric_limits<int>::min());
    const double high
        = parameter.high ? std::floor(*parameter.high) : static_cast<double>(std::numeric_limits<int>::max());
    return {clampToInt(low), clampToInt(high)};
}

QWidget* createParameterWidget(const jobs::Parameter& parameter, const FieldOptions& options, QWidget* parent)
{
    const nlohmann::json start = options.start().is_null() ? parameter.defaultValue : options.start();
    QWidget* widget = nullptr;
    if (parameter.type == jobs::ParameterType::Flag) {
        auto* box = new QCheckBox(parent);
        box->setChecked(start.is_boolean() && start.get<bool>());
        widget = box;
    } else if (parameter.type == jobs::ParameterType::Choice) {
        widget = choiceBox(parameter, start, parent);
    } else if (parameter.type == jobs::ParameterType::Integer && !options.numbersAsText()) {
        widget = integerBox(parameter, options, start, parent);
    } else if (parameter.type == jobs::ParameterType::Number && !options.numbersAsText()) {
        widget = numberBox(parameter, options, start, parent);
    } else {
        auto* edit = new QLineEdit(parent);
        edit->setPlaceholderText(options.placeholder().isEmpty() ? placeholder(parameter) : options.placeholder());
        if (!options.start().is_null()) {
            edit->setText(editText(parameter, options.start()));
        }
        widget = edit;
    }
    widget->setToolTip(QString::fromStdString(parameter.help));
    return widget;
}

nlohmann::json parameterValue(const jobs::Parameter& parameter, const QWidget* field, QString* error)
{
    if (const auto* box = qobject_cast<const QCheckBox*>(field)) {
        return box->isChecked();
    }
    if (const auto* box = qobject_cast<const QSpinBox*>(field)) {
        // An entry below the range is the one that leaves the parameter not given.
        return box->value() < integerRange(parameter).first ? nlohmann::json() : nlohmann::json(box->value());
    }
    if (const auto* box = qobject_cast<const QDoubleSpinBox*>(field)) {
        return box->value();
    }
    QString text;
    if (const auto* box = qobject_cast<const QComboBox*>(field)) {
        text = box->currentData().toString();
    } else if (const auto* picker = qobject_cast<const PathPicker*>(field)) {
        text = picker->path();
    } else if (const auto* edit = qobject_cast<const QLineEdit*>(field)) {
        text = edit->text().trimmed();
    }
    if (text.isEmpty()) {
        return nullptr; // the default, or not given
    }
    const auto parse = [&](const QString& item) -> std::optional<nlohmann::json> {
        const bool path = jobs::elementType(parameter.type) == jobs::ParameterType::Path;
        std::string problem;
        auto parsed = jobs::parseValue(parameter, (path ? absolutePath(item) : item).toStdString(), &problem);
        if (!parsed && error && error->isEmpty()) {
            *error = QStringLiteral("%1: %2").arg(
                QString::fromStdString(parameter.label), QString::fromStdString(problem));
        }
        return parsed;
    };
    if (jobs::isList(parameter.type)) {
        nlohmann::json list = nlohmann::json::array();
        for (const QString& item : listItems(parameter, text)) {
            if (const auto parsed = parse(item)) {
                list.push_back(*parsed);
            }
        }
        return list;
    }
    const auto parsed = parse(text);
    return parsed ? *parsed : nlohmann::json();
}

void setParameter(jobs::JobSpec& spec, const jobs::Parameter& parameter, const QWidget* field, QString* error)
{
    const nlohmann::json value = parameterValue(parameter, field, error);
    if (value.is_null() || value == parameter.defaultValue) {
        spec.unset(parameter.name);
    } else {
        spec.set(parameter.name, value);
    }
}

void setFieldText(QWidget* field, const QString& text)
{
    if (auto* box = qobject_cast<QCheckBox*>(field)) {
        box->setChecked(text == QLatin1String("true"));
    } else if (auto* box = qobject_cast<QSpinBox*>(field)) {
        box->setValue(text.isEmpty() ? box->minimum() : text.toInt());
    } else if (auto* box = qobject_cast<QDoubleSpinBox*>(field)) {
        box->setValue(text.isEmpty() ? box->minimum() : text.toDouble());
    } else if (auto* box = qobject_cast<QComboBox*>(field)) {
        box->setCurrentIndex(std::max(0, box->findData(text)));
    } else if (auto* picker = qobject_cast<PathPicker*>(field)) {
        picker->setPath(text);
    } else if (auto* edit = qobject_cast<QLineEdit*>(field)) {
        edit->setText(text);
    }
}

} // namespace mismatch::ui
