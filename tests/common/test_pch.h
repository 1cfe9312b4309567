// Precompiled header of every Qt Test executable (cmake/MismatchTest.cmake): core's LibTorch headers, then Qt Test
// (the module header the tests include, with QtCore's) and, in GUI builds, Qt Widgets and QCustomPlot. Parsing
// <QtTest> alone took ~4 s per test file, beyond the 1.5 s of loading core's precompiled header.
#pragma once
#include "core/common/torch_pch.h"

#include <QtTest>
#if defined(QT_WIDGETS_LIB)
#include <QtWidgets>
#include <qcustomplot.h>
#endif
