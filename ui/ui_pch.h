// Precompiled header of mismatch_ui and mismatch-lab: core's LibTorch headers, Qt Widgets (the module header, so
// that every widget a file includes is already parsed) and QCustomPlot. Qt's and QCustomPlot's headers were ~6 s of
// each ui file's ~12-15 s compile.
#pragma once
#include "core/common/torch_pch.h"

#include <QtWidgets>
#include <qcustomplot.h>
