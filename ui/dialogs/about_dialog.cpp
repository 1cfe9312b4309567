#include "ui/dialogs/about_dialog.h"

#include "core/common/runtime.h"

#include <qcustomplot.h>

#include <QDialogButtonBox>
#include <QLabel>
#include <QVBoxLayout>

namespace mismatch::ui {

QString AboutDialog::versionsText()
{
    const RuntimeInfo info = runtimeInfo();
    QString devices = info.cudaDevices.empty() ? QObject::tr("none found")
                                               : QString::fromStdString(info.cudaDevices.front());
    QString text;
    text += QObject::tr("Mismatch Lab %1 (git %2)\n").arg(QString::fromStdString(info.version),
        QString::fromStdString(info.gitRevision));
    text += QObject::tr("Qt %1 (built with %2)\n").arg(qVersion(), QT_VERSION_STR);
    text += QObject::tr("LibTorch %1, %2 threads\n").arg(QString::fromStdString(info.torchVersion)).arg(info.threads);
    text += QObject::tr("QCustomPlot %1\n").arg(QCUSTOMPLOT_VERSION_STR);
    text += QObject::tr("CUDA kernels: %1\n")
                .arg(info.cudaBuilt ? QObject::tr("built (CUDA runtime %1)").arg(QString::fromStdString(info.cudaRuntime))
                                    : QObject::tr("not built"));
    text += QObject::tr("CUDA devices: %1\n").arg(devices);
    text += QObject::tr("CUDA available to LibTorch: %1").arg(info.cudaAvailable ? QObject::tr("yes") : QObject::tr("no"));
    return text;
}

AboutDialog::AboutDialog(QWidget* parent) : QDialog(parent)
{
    setWindowTitle(tr("About Mismatch Lab"));
    auto* layout = new QVBoxLayout(this);
    auto* heading = new QLabel(tr("<h3>Mismatch Lab</h3><p>Measures training-inference mismatch for on-policy "
                                  "distillation, calibrates a student's mismatch budget and screens rollout "
                                  "configurations against it.</p>"),
        this);
    heading->setWordWrap(true);
    layout->addWidget(heading);
    auto* versions = new QLabel(versionsText(), this);
    versions->setObjectName("versions");
    versions->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(versions);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    layout->addWidget(buttons);
}

}  // namespace mismatch::ui
