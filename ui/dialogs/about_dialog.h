#pragma once
#include <QDialog>

namespace mismatch::ui {

// Versions of the tool and what it runs on: Qt, LibTorch, QCustomPlot, CUDA kernels and devices.
class AboutDialog : public QDialog {
    Q_OBJECT
public:
    explicit AboutDialog(QWidget* parent = nullptr);
    static QString versionsText();
};

}  // namespace mismatch::ui
