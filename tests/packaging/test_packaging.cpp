// The Debian package, checked from the outside by packaging/test_package.sh: cpack -G DEB on this build
// directory, the .deb unpacked into a temporary root, the unpacked `mismatch` run on its own resources, and
// the desktop entry, metainfo, icon, man page and completions looked for (and validated where the tools are).
#include "tests/common/test_main.h"

#include <QProcess>
#include <QStandardPaths>
#include <QtTest>

class TestPackaging : public QObject {
    Q_OBJECT

private slots:
    void initTestCase()
    {
        for (const char* tool : {"cpack", "dpkg-deb", "dpkg-shlibdeps"}) {
            if (QStandardPaths::findExecutable(QString::fromLatin1(tool)).isEmpty()) {
                QSKIP(qPrintable(QStringLiteral("%1 is not installed").arg(QString::fromLatin1(tool))));
            }
        }
    }

    void packageInstallsAndRunsFromItsOwnRoot()
    {
        QProcess script;
        script.setProcessChannelMode(QProcess::MergedChannels);
        QProcessEnvironment environment = QProcessEnvironment::systemEnvironment();
        // The unpacked program must find the resources next to itself, not through these.
        environment.remove(QStringLiteral("MISMATCH_RESOURCE_DIR"));
        environment.remove(QStringLiteral("MISMATCH_WORKSPACE"));
        script.setProcessEnvironment(environment);
        script.start(QStringLiteral("bash"),
            {QStringLiteral(MISMATCH_SOURCE_DIR "/packaging/test_package.sh"), QStringLiteral(MISMATCH_BINARY_DIR)});
        QVERIFY2(script.waitForStarted(), "bash did not start");
        // cpack re-runs the install of both programs and all resources, then dpkg-shlibdeps
        const int timeoutMs = 15 * 60 * 1000;
        QVERIFY2(script.waitForFinished(timeoutMs), "test_package.sh did not finish in 15 minutes");
        const QString output = QString::fromLocal8Bit(script.readAll());
        qInfo().noquote() << output;
        QCOMPARE(script.exitStatus(), QProcess::NormalExit);
        QVERIFY2(script.exitCode() == 0, qPrintable(QStringLiteral("test_package.sh failed:\n") + output));
        QVERIFY2(output.contains(QStringLiteral("test_package: OK: mismatch-lab_")), qPrintable(output));
    }
};

MISMATCH_TEST_MAIN(TestPackaging)
#include "test_packaging.moc"
